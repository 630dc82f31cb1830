;; A loop of costly host calls: random_get of 32 MiB, for ever. Each call
;; is charged one host call; the host ends it at the deadline.
(module
  (import "wasi_snapshot_preview1" "random_get" (func $rg (param i32 i32) (result i32)))
  (memory (export "memory") 512)
  (func (export "_start")
    (loop $l (drop (call $rg (i32.const 0) (i32.const 0x2000000))) (br $l))))
