;; Prints its data bytes, then overwrites them: a fresh instance must
;; print the original bytes again.
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "AAAA")
  (data (i32.const 8) "CC")
  (func (export "_start")
    (i32.store (i32.const 200) (i32.const 0))
    (i32.store (i32.const 204) (i32.const 10))
    (drop (call $w (i32.const 1) (i32.const 200) (i32.const 1) (i32.const 300)))
    (i32.store (i32.const 0) (i32.const 0x42424242))
    (i32.store (i32.const 8) (i32.const 0x44444444))))
