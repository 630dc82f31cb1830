;; Two mutable globals, no export section, a start function.
(module (global (mut i32) (i32.const 0)) (global (mut i64) (i64.const 0))
  (memory 1) (func) (start 0) (data (i32.const 0) "x"))
