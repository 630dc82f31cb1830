;; Traps at once: unreachable in _start.
(module
  (memory (export "memory") 1)
  (func (export "_start") unreachable))
