;; Mutates tables: table.copy.
(module (table $t 2 funcref) (elem $e func $f) (func $f) (type $v (func))
  (func (param i32)
    (table.copy $t $t (i32.const 0) (i32.const 1) (i32.const 1))))
