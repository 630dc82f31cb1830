;; Recurses 40 frames deep, then traps: the trap's stack trace names the
;; functions after the module's name section, which errtext_test.go adds.
(module
  (memory (export "memory") 1)
  (func $f (param i32)
    (if (i32.eqz (local.get 0)) (then unreachable))
    (call $f (i32.sub (local.get 0) (i32.const 1))))
  (func (export "_start") (call $f (i32.const 40))))
