;; A deterministic workload: a loop of 100,000 calls, a memory.fill of
;; 1 MiB, then a clean return. Its fuel is the same in every run.
(module
  (memory (export "memory") 16)
  (func $inc (param i32) (result i32) (i32.add (local.get 0) (i32.const 1)))
  (func (export "_start") (local $i i32)
    (loop $l
      (local.set $i (call $inc (local.get $i)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 100000))))
    (memory.fill (i32.const 0) (i32.const 7) (i32.const 1048576))))
