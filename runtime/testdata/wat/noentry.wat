;; Neither _start nor a reactor's entry points: refused.
(module
  (memory (export "memory") 1)
  (func (export "main")))
