;; A reactor (no _start): refused.
(module
  (memory (export "memory") 1)
  (func (export "_initialize")))
