;; fd_filestat_set_times on a file of the mount (not stdio): the check in
;; front of wazero's function lets it through. Opens /data/file (fd 3 is
;; the mount), sets its mtime to 10^18 ns (2001-09-09) and exits with the
;; errno (100 + path_open's, if that failed).
(module
  (import "wasi_snapshot_preview1" "path_open"
    (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_filestat_set_times" (func $st (param i32 i64 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "file")
  (func (export "_start")
    (local $e i32)
    (local.set $e (call $open (i32.const 3) (i32.const 0) (i32.const 16) (i32.const 4)
      (i32.const 0) (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 0)))
    (if (local.get $e) (then (call $exit (i32.add (i32.const 100) (local.get $e)))))
    (call $exit (call $st (i32.load (i32.const 0)) (i64.const 0) (i64.const 1000000000000000000) (i32.const 4)))))
