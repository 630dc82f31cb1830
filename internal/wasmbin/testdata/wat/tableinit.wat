;; Mutates tables: table.init.
(module (table $t 2 funcref) (elem $e func $f) (func $f) (type $v (func))
  (func (param i32)
    (table.init $t $e (i32.const 0) (i32.const 0) (i32.const 1))))
