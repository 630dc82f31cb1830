;; A 64-bit memory: the memory64 proposal is not enabled.
(module
  (memory (export "memory") i64 1)
  (func (export "_start")))
