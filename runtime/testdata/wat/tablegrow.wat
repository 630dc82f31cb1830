;; A table without a maximum and code that grows it: refused at compile.
(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (table $t 1 funcref)
  (func (export "_start")
    (loop $l
      (drop (table.grow $t (ref.null func) (i32.const 1000000)))
      (br $l))))
