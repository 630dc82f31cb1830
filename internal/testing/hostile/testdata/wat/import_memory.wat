;; Imports the host's memory instead of defining one.
(module
  (import "agrun" "memory" (memory 1))
  (export "memory" (memory 0))
  (func (export "_start")))
