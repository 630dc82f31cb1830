;; A long body without loops, called from a tree of calls without loops.
(module
  (memory (export "memory") 1)
  (global $g (mut i32) (i32.const 0))
  (func $body
    (global.set $g (i32.add (global.get $g) (i32.const 1)))
    (global.set $g (i32.add (global.get $g) (i32.const 1)))
    (global.set $g (i32.add (global.get $g) (i32.const 1)))
    (global.set $g (i32.add (global.get $g) (i32.const 1))))
  (func $f (param $n i32)
    (if (i32.eqz (local.get $n)) (then (call $body) (return)))
    (call $f (i32.sub (local.get $n) (i32.const 1)))
    (call $f (i32.sub (local.get $n) (i32.const 1))))
  (func (export "_start") (call $f (i32.const 50))))
