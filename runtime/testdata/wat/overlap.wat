;; Overlapping segments: the later one wins; merging must not change that.
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "aaaaaaaa")
  (data (i32.const 2) "BB")
  (data (i32.const 8) "cc")
  (func (export "_start")
    (i32.store (i32.const 200) (i32.const 0))
    (i32.store (i32.const 204) (i32.const 10))
    (drop (call $w (i32.const 1) (i32.const 200) (i32.const 1) (i32.const 300)))))
