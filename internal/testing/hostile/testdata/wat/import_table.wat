;; Imports a table.
(module
  (import "agrun" "table" (table 1 funcref))
  (memory (export "memory") 1)
  (func (export "_start")))
