;; Mutates tables: table.fill.
(module (table $t 2 funcref) (elem $e func $f) (func $f) (type $v (func))
  (func (param i32)
    (table.fill $t (i32.const 0) (ref.null func) (i32.const 1))))
