;; An infinite loop in _start.
(module
  (memory (export "memory") 1)
  (func (export "_start") (loop $l (br $l))))
