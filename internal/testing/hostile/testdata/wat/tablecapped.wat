;; A table capped at 1000 elements grown past it: table.grow returns -1 and
;; the guest goes on; it exits 0 with {"ok":true} if the host refused.
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (table $t 1 1000 funcref)
  (data (i32.const 16) "{\"ok\":true}")
  (func (export "_start")
    (if (i32.ne (table.grow $t (ref.null func) (i32.const 100000)) (i32.const -1))
      (then unreachable))
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 11))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))
