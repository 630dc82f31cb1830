;; An infinite loop in _start, with no call the host could interrupt at.
(module
  (memory (export "memory") 1)
  (func (export "_start") (loop $l (br $l))))
