;; A reactor with a start function: start and _initialize each add 1 to
;; the byte at 32, and each call writes it as a digit: "2". A snapshot
;; would have start run again on top of it ("3"), so every call runs
;; _initialize instead.
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func $bump (i32.store8 (i32.const 32) (i32.add (i32.load8_u (i32.const 32)) (i32.const 1))))
  (start $bump)
  (func (export "_initialize") (call $bump))
  (func (export "agrun_call")
    (i32.store8 (i32.const 33) (i32.add (i32.load8_u (i32.const 32)) (i32.const 48)))
    (i32.store (i32.const 0) (i32.const 33))
    (i32.store (i32.const 4) (i32.const 1))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))
