;; poll_oneoff with 2^28 subscriptions: in wazero 1.12, 2^28*48 and 2^28*32
;; wrap to 0 in uint32, the reads "succeed" and the loop indexes past them.
(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (drop (call $poll (i32.const 0) (i32.const 0) (i32.const 0x10000000) (i32.const 0)))))
