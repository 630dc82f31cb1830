;; A reactor (_initialize, no _start): not a command.
(module
  (memory (export "memory") 1)
  (func (export "_initialize")))
