;; Exception handling: not enabled.
(module
  (tag $e)
  (memory (export "memory") 1)
  (func (export "_start") (throw $e)))
