;; A reactor whose _initialize fills its table (table.init): a snapshot of
;; memory and globals would miss that, so every call runs _initialize.
;; Each call writes "ok\n" through the table.
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (table $t 1 funcref)
  (data (i32.const 16) "ok\n")
  (func $say
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 3))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))
  (elem $e func $say)
  (func (export "_initialize") (table.init $t $e (i32.const 0) (i32.const 0) (i32.const 1)))
  (func (export "agrun_call") (call_indirect $t (i32.const 0))))
