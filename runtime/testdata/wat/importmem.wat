;; Importing a memory is refused.
(module
  (import "env" "memory" (memory 1))
  (export "memory" (memory 0))
  (func (export "_start")))
