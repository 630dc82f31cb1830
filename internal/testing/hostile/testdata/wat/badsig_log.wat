;; agrun.log declared with a result and i64 parameters.
(module
  (import "agrun" "log" (func (param i64 i64 i64) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")))
