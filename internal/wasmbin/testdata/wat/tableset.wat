;; Mutates tables: table.set.
(module (table $t 2 funcref) (elem $e func $f) (func $f) (type $v (func))
  (func (param i32)
    (table.set $t (i32.const 0) (ref.null func))))
