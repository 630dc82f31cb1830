;; _initialize without agrun_call: refused (a reactor tool needs both).
(module
  (memory (export "memory") 1)
  (func (export "_initialize")))
