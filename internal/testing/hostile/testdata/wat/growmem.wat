;; Grows memory 16 pages at a time until refused, then keeps asking.
(module
  (memory (export "memory") 1)
  (func (export "_start")
    (loop $l
      (drop (memory.grow (i32.const 16)))
      (br $l))))
