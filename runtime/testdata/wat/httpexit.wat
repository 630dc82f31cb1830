;; Sends argv[1] to agrun.http_request, then calls proc_exit(0) at once: a
;; guest that exits normally right after a host call that outlived the
;; call's deadline (an exit closes the module before wazero's own close on
;; the deadline can).
(module
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $sizes (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_get" (func $args (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (import "agrun" "http_request" (func $request (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    ;; argc at 0, the size of the argument strings at 4.
    (drop (call $sizes (i32.const 0) (i32.const 4)))
    ;; argv at 16, the strings at 1024; argv[1] is the last one, so its
    ;; length is the end of the strings minus its start, minus the NUL.
    (drop (call $args (i32.const 16) (i32.const 1024)))
    (drop (call $request
      (i32.load (i32.const 20))
      (i32.sub
        (i32.sub (i32.add (i32.const 1024) (i32.load (i32.const 4))) (i32.load (i32.const 20)))
        (i32.const 1))))
    (call $exit (i32.const 0))))
