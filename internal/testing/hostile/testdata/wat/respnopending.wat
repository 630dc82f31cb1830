;; A valid request (to a host that is not allowed), then http_response with
;; a buffer one byte too small (-3, the response stays pending), then the
;; right size; exits with the failing check's number, else writes the
;; response itself to stdout.
(module
  (import "agrun" "http_request" (func $req (param i32 i32) (result i32)))
  (import "agrun" "http_response" (func $resp (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 64) "{\"url\":\"http://not-allowed.invalid/\"}")
  (func (export "_start")
    (local $n i32)
    (local.set $n (call $req (i32.const 64) (i32.const 37)))
    (if (i32.le_s (local.get $n) (i32.const 0)) (then (call $exit (i32.const 1))))
    (if (i32.ne (call $resp (i32.const 1024) (i32.sub (local.get $n) (i32.const 1))) (i32.const -3))
      (then (call $exit (i32.const 2))))
    (if (i32.ne (call $resp (i32.const 1024) (local.get $n)) (local.get $n))
      (then (call $exit (i32.const 3))))
    (if (i32.ne (call $resp (i32.const 1024) (local.get $n)) (i32.const -2))
      (then (call $exit (i32.const 4))))
    (i32.store (i32.const 0) (i32.const 1024))
    (i32.store (i32.const 4) (local.get $n))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))
