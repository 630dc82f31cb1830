;; A table whose declared maximum (4 billion) is far over the cap, grown.
(module
  (memory (export "memory") 1)
  (table $t 1 4000000000 funcref)
  (func (export "_start")
    (drop (table.grow $t (ref.null func) (i32.const 100000000)))))
