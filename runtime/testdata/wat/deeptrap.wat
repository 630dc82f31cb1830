;; A trap 40 frames deep: wazero's error names up to 30 frames after the
;; module's name section (which the tests fill with long names).
(module
  (memory (export "memory") 1)
  (func $f (param i32)
    (if (i32.eqz (local.get 0)) (then unreachable))
    (call $f (i32.sub (local.get 0) (i32.const 1))))
  (func (export "_start") (call $f (i32.const 40))))
