;; Imports agrun.http_request with the wrong signature (one parameter
;; instead of two): the sandbox must refuse the module when it is loaded.
(module
  (import "agrun" "http_request" (func $req (param i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (drop (call $req (i32.const 0)))))
