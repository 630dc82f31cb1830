;; Reads tables only: does not mutate them.
(module (table $t 2 funcref) (elem $e func $f) (func $f) (type $v (func))
  (func (param i32)
    (drop (table.get $t (i32.const 0))) (drop (table.size $t)) (call_indirect (type $v) (i32.const 0))))
