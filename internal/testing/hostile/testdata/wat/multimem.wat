;; Two memories: multi-memory is not enabled.
(module
  (memory (export "memory") 1)
  (memory $b 1)
  (func (export "_start")))
