;; A table without a maximum and code that grows it a million elements at a
;; time, forever: the sandbox must refuse it at compile time.
(module
  (memory (export "memory") 1)
  (table $t 1 funcref)
  (func (export "_start")
    (loop $l
      (drop (table.grow $t (ref.null func) (i32.const 1000000)))
      (br $l))))
