;; Imported and defined globals of three types, and a start function.
(module
  (import "env" "g" (global i32))
  (global i32 (i32.const 1))
  (global (mut i64) (i64.const 2))
  (global (mut f64) (f64.const 3))
  (func $f)
  (start $f))
