#!/usr/bin/env bash
# Installs what the test suite needs on a fresh machine (Debian, root or sudo):
#   - wabt (wat2wasm) for hand-written hostile test modules,
#   - clang/lld/wasi-libc for the C example tool,
#   - the npm MCP reference servers used by the mcp tests (into .cache/npm).
# Safe to run repeatedly: it skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v wat2wasm >/dev/null || need+=(wabt)
command -v clang >/dev/null || need+=(clang)
command -v wasm-ld >/dev/null || command -v wasm-ld-14 >/dev/null || need+=(lld)
[ -d /usr/include/wasm32-wasi ] || [ -d /usr/share/wasi-sysroot ] || need+=(wasi-libc)
ls /usr/lib/llvm-14/lib/clang/14*/lib/wasi/libclang_rt.builtins-wasm32.a >/dev/null 2>&1 || need+=(libclang-rt-14-dev-wasm32)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  echo "setup: installing ${need[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
