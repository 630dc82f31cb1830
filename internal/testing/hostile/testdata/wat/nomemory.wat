;; No exported memory.
(module
  (memory 1)
  (func (export "_start")))
