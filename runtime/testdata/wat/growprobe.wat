;; memory.grow and table.grow of absurd sizes fail (-1); exit code 0 when
;; both failed.
(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1 1024)
  (table $t 1 10 funcref)
  (func (export "_start")
    (call $exit (i32.add (i32.add (i32.const 2) (memory.grow (i32.const 0x7fffffff)))
                         (table.grow $t (ref.null func) (i32.const 0x7fffffff))))))
