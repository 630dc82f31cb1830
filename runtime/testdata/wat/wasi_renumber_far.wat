;; fd_renumber onto a far descriptor number: in wazero 1.12 the file
;; table grows to that number at once, 8 bytes per slot on the host,
;; charged to no limit (2^27 is 1 GiB; 2^31-1 would be 16 GiB). The guest
;; opens /data/file (fd 3 is the mount), moves it to 2^27 and exits with
;; fd_renumber's errno (100 + path_open's, if that failed).
(module
  (import "wasi_snapshot_preview1" "path_open"
    (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_renumber" (func $ren (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "file")
  (func (export "_start")
    (local $e i32)
    (local.set $e (call $open (i32.const 3) (i32.const 0) (i32.const 16) (i32.const 4)
      (i32.const 0) (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 0)))
    (if (local.get $e) (then (call $exit (i32.add (i32.const 100) (local.get $e)))))
    (call $exit (call $ren (i32.load (i32.const 0)) (i32.const 0x08000000)))))
