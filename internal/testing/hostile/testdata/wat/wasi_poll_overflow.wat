;; poll_oneoff with 2^28 subscriptions: wazero 1.12 computes their sizes
;; (n*48, n*32) in uint32, both wrap to 0, and its loop indexes past the
;; empty buffers: a Go panic, which wazero recovers and reports with the
;; host's debug.Stack().
(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (drop (call $poll (i32.const 0) (i32.const 0) (i32.const 0x10000000) (i32.const 0)))))
