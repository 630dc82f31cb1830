;; A reactor that tries to carry data from one call to the next. stdin is
;; a 16-byte marker. agrun_call searches all of its memory (outside the 16
;; bytes it read, at 0x1000) and a global for the marker and writes
;; "found" or "clean"; then it stores the marker in the global (its first
;; 8 bytes), in the data area, near the end of memory, and in a page it
;; grows. Any call after the first that finds it sees an earlier call.
(module
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (global $g (mut i64) (i64.const 0))
  (data (i32.const 0x100) "found")
  (data (i32.const 0x110) "clean")
  (func $initialize (export "_initialize"))
  ;; read 16 bytes of stdin to 0x1000
  (func $read
    (i32.store (i32.const 0) (i32.const 0x1000))
    (i32.store (i32.const 4) (i32.const 16))
    (drop (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8))))
  (func $write (param $p i32) (param $n i32)
    (i32.store (i32.const 0) (local.get $p))
    (i32.store (i32.const 4) (local.get $n))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))
  ;; is the 16-byte needle at 0x1000 anywhere else in memory?
  (func $search (result i32) (local $p i32) (local $end i32)
    (local.set $end (i32.sub (i32.mul (memory.size) (i32.const 65536)) (i32.const 16)))
    (block $done
      (loop $l
        (br_if $done (i32.gt_u (local.get $p) (local.get $end)))
        (if (i32.and
              (i32.or (i32.lt_u (local.get $p) (i32.const 0xff1)) (i32.gt_u (local.get $p) (i32.const 0x100f)))
              (i32.and
                (i64.eq (i64.load (local.get $p)) (i64.load (i32.const 0x1000)))
                (i64.eq (i64.load offset=8 (local.get $p)) (i64.load (i32.const 0x1008)))))
          (then (return (i32.const 1))))
        (local.set $p (i32.add (local.get $p) (i32.const 1)))
        (br $l)))
    ;; the global, too
    (i64.eq (global.get $g) (i64.load (i32.const 0x1000))))
  (func (export "agrun_call") (local $top i32)
    (call $read)
    (if (call $search)
      (then (call $write (i32.const 0x100) (i32.const 5)))
      (else (call $write (i32.const 0x110) (i32.const 5))))
    ;; store the marker everywhere
    (global.set $g (i64.load (i32.const 0x1000)))
    (v128.store (i32.const 0x2000) (v128.load (i32.const 0x1000)))
    (local.set $top (i32.sub (i32.mul (memory.size) (i32.const 65536)) (i32.const 16)))
    (v128.store (local.get $top) (v128.load (i32.const 0x1000)))
    (drop (memory.grow (i32.const 1)))
    (local.set $top (i32.sub (i32.mul (memory.size) (i32.const 65536)) (i32.const 16)))
    (v128.store (local.get $top) (v128.load (i32.const 0x1000)))))
