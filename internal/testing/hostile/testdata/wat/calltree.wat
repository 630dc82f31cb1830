;; No loop anywhere: $f(n) calls $f(n-1) twice, and _start calls $f(60),
;; 2^60 calls. wazero's own interruption checks only at loop headers.
(module
  (memory (export "memory") 1)
  (func $f (param $n i32)
    (if (i32.eqz (local.get $n)) (then (return)))
    (call $f (i32.sub (local.get $n) (i32.const 1)))
    (call $f (i32.sub (local.get $n) (i32.const 1))))
  (func (export "_start") (call $f (i32.const 60))))
