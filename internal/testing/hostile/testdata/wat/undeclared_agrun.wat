;; An agrun function that does not exist.
(module
  (import "agrun" "exec" (func (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")))
