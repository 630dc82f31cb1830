;; A bounded table and an unbounded one that the code grows: refused, and
;; the message names table 1.
(module
  (memory (export "memory") 1)
  (table $bounded 1 4 funcref)
  (table $free 1 funcref)
  (func (export "_start")
    (drop (table.grow $free (ref.null func) (i32.const 2)))))
