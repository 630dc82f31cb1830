;; Two mutable globals and no section after them.
(module (global (mut i32) (i32.const 0)) (global (mut i64) (i64.const 0)))
