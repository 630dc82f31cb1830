;; Two tables: an unbounded one nothing grows (like Go's) and a bounded one
;; that is grown. Accepted: neither can grow past the cap.
(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (table $free 3 funcref)
  (table $bounded 1 4 funcref)
  (func (export "_start")
    (drop (table.grow $bounded (ref.null func) (i32.const 2)))
    (call $exit (i32.add (table.size $free) (table.size $bounded)))))
