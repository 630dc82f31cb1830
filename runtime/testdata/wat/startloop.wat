;; An infinite loop in the module's start function, which runs while the
;; module is being instantiated, before _start.
(module
  (memory (export "memory") 1)
  (func $forever (loop $l (br $l)))
  (start $forever)
  (func (export "_start")))
