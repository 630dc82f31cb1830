;; Mutates tables: elem.drop.
(module (table $t 2 funcref) (elem $e func $f) (func $f) (type $v (func))
  (func (param i32)
    (elem.drop $e)))
