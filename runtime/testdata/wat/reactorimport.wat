;; A reactor entry point that is an imported function: refused.
(module
  (import "wasi_snapshot_preview1" "sched_yield" (func $y (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func $init (export "agrun_call"))
  (export "_initialize" (func $exit)))
