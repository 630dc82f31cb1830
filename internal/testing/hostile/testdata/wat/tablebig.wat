;; An initial table of ten million elements: refused without any growth.
(module
  (memory (export "memory") 1)
  (table 10000000 funcref)
  (func (export "_start")))
