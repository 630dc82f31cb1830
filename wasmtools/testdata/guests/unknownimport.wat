;; Imports a function the agrun module does not have: refused at load.
(module
  (import "agrun" "spawn" (func $spawn (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (drop (call $spawn (i32.const 0) (i32.const 0)))))
