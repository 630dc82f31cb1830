;; Starts with 48 MiB of memory and writes to every page, so each instance
;; really costs 48 MiB of RSS while it runs; then spins until the timeout.
(module
  (memory (export "memory") 768)
  (func (export "_start")
    (local $p i32)
    (loop $l
      (i32.store8 (local.get $p) (i32.const 1))
      (local.set $p (i32.add (local.get $p) (i32.const 4096)))
      (br_if $l (i32.lt_u (local.get $p) (i32.const 50331648))))
    (loop $spin (br $spin))))
