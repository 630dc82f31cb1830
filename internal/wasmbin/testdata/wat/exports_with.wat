;; Two mutable globals, with an export section already.
(module (global (mut i32) (i32.const 0)) (global (mut i64) (i64.const 0))
  (memory (export "memory") 1) (func (export "f")) (data (i32.const 0) "x"))
