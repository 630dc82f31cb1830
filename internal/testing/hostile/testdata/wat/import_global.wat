;; Imports a global.
(module
  (import "agrun" "g" (global i32))
  (memory (export "memory") 1)
  (func (export "_start")))
