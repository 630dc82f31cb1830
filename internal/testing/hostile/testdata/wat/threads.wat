;; A shared memory and an atomic: the threads proposal is not enabled.
(module
  (memory (export "memory") 1 1 shared)
  (func (export "_start")
    (drop (i32.atomic.rmw.add (i32.const 0) (i32.const 1)))))
