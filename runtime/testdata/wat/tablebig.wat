;; A table whose initial size is over the cap: refused even without growth.
(module
  (memory (export "memory") 1)
  (table 200000 funcref)
  (func (export "_start")))
