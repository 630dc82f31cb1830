;; Data segments out of order, adjacent, with small and large gaps, plus a
;; segment beyond a large gap. _start writes bytes 0..64 and 70000..70004
;; to stdout, so a run shows whether merging kept every byte in place.
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 10) "CDEF")
  (data (i32.const 0) "AB")
  (data (i32.const 14) "GH")
  (data (i32.const 40) "XY")
  (data (i32.const 70000) "far!")
  (func (export "_start")
    ;; iovecs at 200: {0, 64}, {70000, 4}
    (i32.store (i32.const 200) (i32.const 0))
    (i32.store (i32.const 204) (i32.const 64))
    (i32.store (i32.const 208) (i32.const 70000))
    (i32.store (i32.const 212) (i32.const 4))
    (drop (call $w (i32.const 1) (i32.const 200) (i32.const 2) (i32.const 300)))))
