;; 2000 pages (125 MiB) of initial memory: over the 64 MiB default.
(module
  (memory (export "memory") 2000)
  (func (export "_start")))
