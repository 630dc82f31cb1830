;; poll_oneoff as an honest guest calls it: one clock subscription of
;; 1 ms (relative), after which it exits with the errno and, at 64, the
;; event count (want 0 and 1).
(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  ;; subscription at 0: userdata 0, tag 0 (clock), clock id 1 (monotonic),
  ;; timeout 1e6 ns, precision 0, flags 0 (relative)
  (data (i32.const 8) "\00")
  (data (i32.const 16) "\01\00\00\00\00\00\00\00\40\42\0f\00\00\00\00\00")
  (func (export "_start")
    (local $e i32)
    (local.set $e (call $poll (i32.const 0) (i32.const 1024) (i32.const 1) (i32.const 64)))
    (call $exit (i32.add (local.get $e) (i32.mul (i32.load (i32.const 64)) (i32.const 10))))))
