;; A reactor whose _initialize does what the first byte of argv[1] says:
;; 'o' write "init " to stdout, 'l' agrun.log "init", 'f' stat "x" in the
;; first preopened directory, 'h' call agrun.http_request, 't' trap,
;; 'w' loop forever, 'i' read one byte of stdin and write it, 'd' open the
;; first preopen's root itself, 'c' close the first preopen, 'g' fill its
;; memory (2 pages) with non-zero bytes; anything else nothing. agrun_call writes "call\n",
;; after (for 'f') a byte '0'+errno of that stat.
(module
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $args_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_get" (func $args_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open" (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_close" (func $fd_close (param i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_filestat_get" (func $stat (param i32 i32 i32 i32 i32) (result i32)))
  (import "agrun" "log" (func $log (param i32 i32 i32)))
  (import "agrun" "http_request" (func $http (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  ;; 0: iovec, 8: nwritten, 12: argc, 16: argv size, 100: stat errno,
  ;; 1024: argv pointers, 2048: argv strings, 4096: filestat
  (data (i32.const 256) "init ")
  (data (i32.const 272) "call\n")
  (data (i32.const 288) "x")
  (data (i32.const 304) "{}")
  (data (i32.const 320) ".")
  (func $write (param $p i32) (param $n i32)
    (i32.store (i32.const 0) (local.get $p))
    (i32.store (i32.const 4) (local.get $n))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))
  (func $mode (result i32)
    (drop (call $args_sizes_get (i32.const 12) (i32.const 16)))
    (if (i32.lt_u (i32.load (i32.const 12)) (i32.const 2)) (then (return (i32.const 0))))
    (drop (call $args_get (i32.const 1024) (i32.const 2048)))
    (i32.load8_u (i32.load (i32.const 1028))))
  (func (export "_initialize") (local $m i32)
    (local.set $m (call $mode))
    (if (i32.eq (local.get $m) (i32.const 111)) (then (call $write (i32.const 256) (i32.const 5))))
    (if (i32.eq (local.get $m) (i32.const 108)) (then (call $log (i32.const 1) (i32.const 256) (i32.const 4))))
    (if (i32.eq (local.get $m) (i32.const 102))
      (then (i32.store8 (i32.const 100) (call $stat (i32.const 3) (i32.const 0) (i32.const 288) (i32.const 1) (i32.const 4096)))))
    (if (i32.eq (local.get $m) (i32.const 104)) (then (drop (call $http (i32.const 304) (i32.const 2)))))
    (if (i32.eq (local.get $m) (i32.const 116)) (then unreachable))
    (if (i32.eq (local.get $m) (i32.const 119)) (then (loop $l (br $l))))
    (if (i32.eq (local.get $m) (i32.const 105))
      (then
        (i32.store (i32.const 0) (i32.const 102))
        (i32.store (i32.const 4) (i32.const 1))
        (drop (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
        (call $write (i32.const 102) (i32.const 1))))
    (if (i32.eq (local.get $m) (i32.const 100))
      (then (drop (call $path_open (i32.const 3) (i32.const 1) (i32.const 320) (i32.const 1)
        (i32.const 0) (i64.const -1) (i64.const -1) (i32.const 0) (i32.const 8)))))
    (if (i32.eq (local.get $m) (i32.const 99)) (then (drop (call $fd_close (i32.const 3)))))
    (if (i32.eq (local.get $m) (i32.const 103))
      (then (memory.fill (i32.const 8192) (i32.const 0x5a) (i32.const 57344)))))
  (func (export "agrun_call")
    (if (i32.eq (call $mode) (i32.const 102))
      (then
        (i32.store8 (i32.const 101) (i32.add (i32.const 48) (i32.load8_u (i32.const 100))))
        (call $write (i32.const 101) (i32.const 1))))
    (call $write (i32.const 272) (i32.const 5))))
