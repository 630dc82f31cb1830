;; agrun_call must take and return nothing.
(module
  (memory (export "memory") 1)
  (func (export "_initialize"))
  (func (export "agrun_call") (param i32)))
