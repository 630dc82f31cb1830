;; Mutates tables: table.grow.
(module (table $t 2 funcref) (elem $e func $f) (func $f) (type $v (func))
  (func (param i32)
    (drop (table.grow $t (ref.null func) (i32.const 1)))))
