;; Grows memory until refused, ignoring failures.
(module
  (memory (export "memory") 1)
  (func (export "_start")
    (loop $l
      (drop (memory.grow (i32.const 16)))
      (br $l))))
