;; Calls the agrun host functions with every bad pointer and length we know
;; and exits with the number of the first check whose answer was wrong, or
;; writes {"ok":true} when the host refused them all (-1 EFAULT, -2 no
;; pending response, -4 request too large) without trapping or crashing.
(module
  (import "agrun" "log" (func $log (param i32 i32 i32)))
  (import "agrun" "http_request" (func $req (param i32 i32) (result i32)))
  (import "agrun" "http_response" (func $resp (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "{\"ok\":true}")
  (func $want (param $check i32) (param $got i32) (param $want i32)
    (if (i32.ne (local.get $got) (local.get $want))
      (then (call $exit (local.get $check)))))
  (func (export "_start")
    ;; pointer past the end of memory
    (call $want (i32.const 1) (call $req (i32.const 0xFFFFFFF0) (i32.const 100)) (i32.const -1))
    ;; range straddling the end of memory
    (call $want (i32.const 2) (call $req (i32.const 65500) (i32.const 100)) (i32.const -1))
    ;; length near 2^32
    (call $want (i32.const 3) (call $req (i32.const 0) (i32.const 0xFFFFFFFF)) (i32.const -4))
    (call $want (i32.const 4) (call $req (i32.const 16) (i32.const 0xFFFFFFF0)) (i32.const -4))
    ;; pointer + length overflowing 32 bits
    (call $want (i32.const 5) (call $req (i32.const 0xFFFFFF00) (i32.const 0x200)) (i32.const -1))
    ;; no pending response, and bad response buffers
    (call $want (i32.const 6) (call $resp (i32.const 0) (i32.const 100)) (i32.const -2))
    (call $want (i32.const 7) (call $resp (i32.const 0xFFFFFFFF) (i32.const 1)) (i32.const -1))
    (call $want (i32.const 8) (call $resp (i32.const 0) (i32.const 0xFFFFFFFF)) (i32.const -1))
    (call $want (i32.const 9) (call $resp (i32.const 65535) (i32.const 2)) (i32.const -1))
    ;; log: every bad range is dropped silently
    (call $log (i32.const 1) (i32.const 0xFFFFFFF0) (i32.const 0xFFFFFFFF))
    (call $log (i32.const 1) (i32.const 0) (i32.const 0xFFFFFFFF))
    (call $log (i32.const 0x7FFFFFFF) (i32.const 65535) (i32.const 2))
    (call $log (i32.const -5) (i32.const 16) (i32.const 11))
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 11))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))
