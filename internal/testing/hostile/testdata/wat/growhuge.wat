;; Asks for the whole 4 GiB address space in one memory.grow.
(module
  (memory (export "memory") 1)
  (func (export "_start")
    (drop (memory.grow (i32.const 65535)))))
