;; A declared minimum of 65536 pages (4 GiB): over any memory limit.
(module
  (memory (export "memory") 65536)
  (func (export "_start")))
