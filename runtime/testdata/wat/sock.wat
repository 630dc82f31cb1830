;; Tries the WASI socket calls on every plausible fd; exits with the number
;; of calls that succeeded (0 expected: there are no sockets).
(module
  (import "wasi_snapshot_preview1" "sock_accept" (func $accept (param i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "sock_send" (func $send (param i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "sock_shutdown" (func $shutdown (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (local $fd i32) (local $ok i32)
    (loop $l
      (if (i32.eqz (call $accept (local.get $fd) (i32.const 0) (i32.const 100)))
        (then (local.set $ok (i32.add (local.get $ok) (i32.const 1)))))
      (if (i32.eqz (call $send (local.get $fd) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 104)))
        (then (local.set $ok (i32.add (local.get $ok) (i32.const 1)))))
      (if (i32.eqz (call $shutdown (local.get $fd) (i32.const 3)))
        (then (local.set $ok (i32.add (local.get $ok) (i32.const 1)))))
      (local.set $fd (i32.add (local.get $fd) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $fd) (i32.const 16))))
    (call $exit (local.get $ok))))
