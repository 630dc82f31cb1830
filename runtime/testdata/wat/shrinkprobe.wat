;; TestShrinkProbe (shrink_probe_test.go): _initialize grows the memory past
;; its declared minimum, so the snapshot is 2 pages of a 1-page memory. The
;; first byte of stdin is the mode: 'g' grows to 6 pages and fills the grown ones; 'h' grows to 6 and writes F if any byte past 2 pages is not zero; 'o', 'f', 'c' load, fill, copy just past 2 pages (a trap on a fresh instance). Every call writes memory.size before and after and the byte _initialize set.
(module
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1 64)
  (func (export "_initialize")
    (drop (memory.grow (i32.const 1)))
    (i32.store8 (i32.const 0x3000) (i32.const 0x49)))
  (func $out (param $b i32)
    (i32.store8 (i32.const 0x200) (local.get $b))
    (i32.store (i32.const 0) (i32.const 0x200))
    (i32.store (i32.const 4) (i32.const 1))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))
  (func (export "agrun_call") (local $mode i32) (local $p i32) (local $end i32)
    (i32.store (i32.const 0) (i32.const 0x1000))
    (i32.store (i32.const 4) (i32.const 4))
    (drop (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
    (local.set $mode (i32.load8_u (i32.const 0x1000)))
    (call $out (i32.add (i32.const 0x30) (memory.size)))
    ;; 'g': grow to 6 pages and dirty all of it
    (if (i32.eq (local.get $mode) (i32.const 0x67)) (then
      (drop (memory.grow (i32.const 4)))
      (memory.fill (i32.const 0x20000) (i32.const 0xaa) (i32.const 0x40000))))
    ;; 'h': grow to 6 pages and look for anything non-zero past 2 pages
    (if (i32.eq (local.get $mode) (i32.const 0x68)) (then
      (drop (memory.grow (i32.const 4)))
      (local.set $p (i32.const 0x20000))
      (local.set $end (i32.mul (memory.size) (i32.const 65536)))
      (block $done (loop $l
        (br_if $done (i32.ge_u (local.get $p) (local.get $end)))
        (if (i64.ne (i64.load (local.get $p)) (i64.const 0)) (then (call $out (i32.const 0x46)) (br $done)))
        (local.set $p (i32.add (local.get $p) (i32.const 8)))
        (br $l)))))
    ;; 'o': load just past 2 pages: must trap
    (if (i32.eq (local.get $mode) (i32.const 0x6f)) (then (call $out (i32.load8_u (i32.const 0x20000)))))
    ;; 'f': fill across the end of 2 pages: must trap
    (if (i32.eq (local.get $mode) (i32.const 0x66)) (then (memory.fill (i32.const 0x1ffff) (i32.const 1) (i32.const 2))))
    ;; 'c': copy from past the end: must trap
    (if (i32.eq (local.get $mode) (i32.const 0x63)) (then (memory.copy (i32.const 0) (i32.const 0x1fff0) (i32.const 0x20))))
    (call $out (i32.add (i32.const 0x30) (memory.size)))
    (call $out (i32.load8_u (i32.const 0x3000))))
)
