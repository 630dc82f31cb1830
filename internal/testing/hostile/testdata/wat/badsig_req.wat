;; agrun.http_request with an extra parameter.
(module
  (import "agrun" "http_request" (func (param i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")))
