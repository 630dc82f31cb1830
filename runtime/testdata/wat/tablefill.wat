;; table.fill with an unbounded table is refused like table.grow.
(module
  (memory (export "memory") 1)
  (table $t 10 funcref)
  (func (export "_start")
    (table.fill $t (i32.const 0) (ref.null func) (i32.const 5))))
