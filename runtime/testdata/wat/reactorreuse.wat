;; A reactor that tries to see what an earlier call left in its instance,
;; for TestReuseDifferential. stdin: a mode byte, a recursion depth (u16,
;; little-endian) and a 16-byte marker. Every call first reports what it
;; sees, 8 bytes on stdout:
;;   'F' if the marker's first 8 bytes are anywhere in memory (outside
;;   the input at 0x1000) or in global $g, else 'C'; the low bytes of
;;   globals $h and $k; what the two table slots return (call_indirect);
;;   memory.size; the byte at 0x3000 (set by _initialize); whether the
;;   depth was reached ('D').
;; and one byte, 'e', on stderr. Then it stores the marker in $g, in the
;; data area, at the top of memory, raises $h, and ends as the mode says:
;;   'n' returns; 't' traps; 'l' loops for ever; 'x' proc_exit(0);
;;   'y' proc_exit(3); 'c' closes stderr and returns; 'o' tries to open a
;;   file and returns; 'g' grows the memory by a page, writes the marker
;;   there and returns; 'h' grows the memory by a page before it looks
;;   (the marker in a page an earlier call grew must not be there) and
;;   returns; 'r' reads random bytes and the clock and returns.
(module
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_close" (func $fd_close (param i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock_time_get (param i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open" (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (global $g (mut i64) (i64.const 0))
  (global $h (mut i32) (i32.const 1))
  (global $k (mut i32) (i32.const 2))
  (type $ret (func (result i32)))
  (table 2 funcref)
  (elem (i32.const 0) $one $two)
  (func $one (type $ret) (i32.const 0x31))
  (func $two (type $ret) (i32.const 0x32))
  (data (i32.const 0x100) "f.txt")
  (func (export "_initialize")
    (global.set $h (i32.const 0x48))
    (i32.store8 (i32.const 0x3000) (i32.const 0x49)))
  (func $read
    (i32.store (i32.const 0) (i32.const 0x1000))
    (i32.store (i32.const 4) (i32.const 19))
    (drop (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8))))
  (func $write (param $fd i32) (param $p i32) (param $n i32)
    (i32.store (i32.const 0) (local.get $p))
    (i32.store (i32.const 4) (local.get $n))
    (drop (call $fd_write (local.get $fd) (i32.const 0) (i32.const 1) (i32.const 8))))
  ;; is the marker (at 0x1003) anywhere else in memory, or in $g?
  (func $search (result i32) (local $p i32) (local $end i32)
    (local.set $end (i32.sub (i32.mul (memory.size) (i32.const 65536)) (i32.const 8)))
    (block $done
      (loop $l
        (br_if $done (i32.gt_u (local.get $p) (local.get $end)))
        (if (i32.and
              (i32.or (i32.lt_u (local.get $p) (i32.const 0xff0)) (i32.gt_u (local.get $p) (i32.const 0x1020)))
              (i64.eq (i64.load (local.get $p)) (i64.load (i32.const 0x1003))))
          (then (return (i32.const 1))))
        (local.set $p (i32.add (local.get $p) (i32.const 1)))
        (br $l)))
    (i64.eq (global.get $g) (i64.load (i32.const 0x1003))))
  ;; recursion to a depth: 1 if it got there
  (func $rec (param $n i32) (result i32)
    (if (result i32) (i32.eqz (local.get $n))
      (then (i32.const 1))
      (else (call $rec (i32.sub (local.get $n) (i32.const 1))))))
  (func (export "agrun_call") (local $top i32) (local $mode i32)
    (call $read)
    (local.set $mode (i32.load8_u (i32.const 0x1000)))
    ;; 'h': grow by a page before looking, so that the search covers
    ;; pages an earlier call grew, wrote and had taken away
    (if (i32.eq (local.get $mode) (i32.const 0x68)) (then (drop (memory.grow (i32.const 1)))))
    (i32.store8 (i32.const 0x200) (select (i32.const 0x46) (i32.const 0x43) (call $search)))
    (i32.store8 (i32.const 0x201) (global.get $h))
    (i32.store8 (i32.const 0x202) (global.get $k))
    (i32.store8 (i32.const 0x203) (call_indirect (type $ret) (i32.const 0)))
    (i32.store8 (i32.const 0x204) (call_indirect (type $ret) (i32.const 1)))
    (i32.store8 (i32.const 0x205) (memory.size))
    (i32.store8 (i32.const 0x206) (i32.load8_u (i32.const 0x3000)))
    (i32.store8 (i32.const 0x207) (select (i32.const 0x44) (i32.const 0x2d)
      (call $rec (i32.load16_u (i32.const 0x1001)))))
    (call $write (i32.const 1) (i32.const 0x200) (i32.const 8))
    (i32.store8 (i32.const 0x210) (i32.const 0x65))
    (call $write (i32.const 2) (i32.const 0x210) (i32.const 1))
    ;; leave the marker everywhere
    (global.set $g (i64.load (i32.const 0x1003)))
    (global.set $h (i32.add (global.get $h) (i32.const 1)))
    (global.set $k (i32.const 0x7a))
    (i64.store (i32.const 0x2000) (i64.load (i32.const 0x1003)))
    (i32.store8 (i32.const 0x3000) (i32.const 0x7a))
    (local.set $top (i32.sub (i32.mul (memory.size) (i32.const 65536)) (i32.const 8)))
    (i64.store (local.get $top) (i64.load (i32.const 0x1003)))
    (if (i32.eq (local.get $mode) (i32.const 0x74)) (then unreachable))
    (if (i32.eq (local.get $mode) (i32.const 0x6c)) (then (loop $forever (br $forever))))
    (if (i32.eq (local.get $mode) (i32.const 0x78)) (then (call $proc_exit (i32.const 0))))
    (if (i32.eq (local.get $mode) (i32.const 0x79)) (then (call $proc_exit (i32.const 3))))
    (if (i32.eq (local.get $mode) (i32.const 0x63)) (then (drop (call $fd_close (i32.const 2)))))
    (if (i32.eq (local.get $mode) (i32.const 0x6f))
      (then (drop (call $path_open (i32.const 3) (i32.const 0) (i32.const 0x100) (i32.const 5)
        (i32.const 0) (i64.const 0) (i64.const 0) (i32.const 0) (i32.const 0x400)))))
    (if (i32.eq (local.get $mode) (i32.const 0x67))
      (then
        (drop (memory.grow (i32.const 1)))
        (local.set $top (i32.sub (i32.mul (memory.size) (i32.const 65536)) (i32.const 8)))
        (i64.store (local.get $top) (i64.load (i32.const 0x1003)))))
    (if (i32.eq (local.get $mode) (i32.const 0x72))
      (then
        (drop (call $random_get (i32.const 0x2100) (i32.const 16)))
        (drop (call $clock_time_get (i32.const 1) (i64.const 1) (i32.const 0x2200))))))
)
