;; A table without a maximum and code that grows it by a million each turn.
(module
  (memory (export "memory") 1)
  (table $t 1 funcref)
  (func (export "_start")
    (loop $l
      (drop (table.grow $t (ref.null func) (i32.const 1000000)))
      (br $l))))
