;; An mcp.run-style servlet (exports describe and call) for
;; wasmtools' MCP-style plug-in tests, written against Extism's kernel
;; functions directly: describe lists one tool, "echo"; call answers
;; {"structuredContent": INPUT}, so a test sees exactly the input agrun
;; gave the servlet.
(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (import "extism:host/env" "input_length" (func $input_length (result i64)))
  (import "extism:host/env" "input_load_u8" (func $input_load_u8 (param i64) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "{\"tools\":[{\"name\":\"echo\",\"description\":\"Echo the call\",\"inputSchema\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\"}}}}]}")
  (data (i32.const 512) "{\"structuredContent\":")

  ;; copy stores len bytes of guest memory at src into the block at dst.
  (func $copy (param $dst i64) (param $src i32) (param $len i32)
    (local $i i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $len)))
        (call $store_u8
          (i64.add (local.get $dst) (i64.extend_i32_u (local.get $i)))
          (i32.load8_u (i32.add (local.get $src) (local.get $i))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next))))

  (func (export "describe") (result i32)
    (local $out i64)
    (local.set $out (call $alloc (i64.const 126)))
    (call $copy (local.get $out) (i32.const 0) (i32.const 126))
    (call $output_set (local.get $out) (i64.const 126))
    (i32.const 0))

  (func (export "call") (result i32)
    (local $n i64) (local $out i64) (local $i i64)
    (local.set $n (call $input_length))
    (local.set $out (call $alloc (i64.add (local.get $n) (i64.const 22))))
    (call $copy (local.get $out) (i32.const 512) (i32.const 21))
    (block $done
      (loop $next
        (br_if $done (i64.ge_u (local.get $i) (local.get $n)))
        (call $store_u8
          (i64.add (local.get $out) (i64.add (i64.const 21) (local.get $i)))
          (call $input_load_u8 (local.get $i)))
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (br $next)))
    (call $store_u8 (i64.add (local.get $out) (i64.add (i64.const 21) (local.get $n))) (i32.const 125))
    (call $output_set (local.get $out) (i64.add (local.get $n) (i64.const 22)))
    (i32.const 0)))
