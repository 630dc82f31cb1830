;; A table with a maximum within the cap may grow up to it: accepted.
(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (table $t 1 10 funcref)
  (func (export "_start")
    (drop (table.grow $t (ref.null func) (i32.const 5)))
    ;; grow past the maximum fails with -1; exit with table.size (6).
    (if (i32.ne (table.grow $t (ref.null func) (i32.const 100)) (i32.const -1))
      (then unreachable))
    (call $exit (table.size $t))))
