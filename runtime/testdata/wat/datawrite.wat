;; Grows memory by a page, prints its data bytes, a heap word and a word of
;; the grown page, then overwrites all three: every fresh instance must
;; print the original bytes and zeros again.
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "AAAA")
  (data (i32.const 8) "CC")
  (func (export "_start")
    (drop (memory.grow (i32.const 1)))
    ;; iovecs at 200: {0, 10}, {1000, 4}, {65546, 4}
    (i32.store (i32.const 200) (i32.const 0))
    (i32.store (i32.const 204) (i32.const 10))
    (i32.store (i32.const 208) (i32.const 1000))
    (i32.store (i32.const 212) (i32.const 4))
    (i32.store (i32.const 216) (i32.const 65546))
    (i32.store (i32.const 220) (i32.const 4))
    (drop (call $w (i32.const 1) (i32.const 200) (i32.const 3) (i32.const 300)))
    (i32.store (i32.const 0) (i32.const 0x42424242))
    (i32.store (i32.const 8) (i32.const 0x44444444))
    (i32.store (i32.const 1000) (i32.const 0x45454545))
    (i32.store (i32.const 65546) (i32.const 0x46464646))))
