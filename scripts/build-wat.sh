#!/usr/bin/env bash
# Assembles every hand-written WebAssembly text fixture (*.wat, the hostile
# and runtime test modules) into the .wasm committed beside it, so that the
# tests read bytes and need no wabt: `go test ./...` runs with only Go.
#
#   scripts/build-wat.sh           rebuild every X.wasm beside its X.wat
#   scripts/build-wat.sh --check   assemble into a temporary directory and
#                                  fail if a committed .wasm differs, is
#                                  missing, or has no .wat (CI)
#
# Fixed flags: wat2wasm --enable-all (the fixtures use threads, memory64,
# exceptions, multi-memory...), no debug names; wabt pinned by WABT_VERSION
# below (Debian package wabt; scripts/setup.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."

WABT_VERSION=1.0.32
WAT2WASM=(wat2wasm --enable-all)

check=0
case "${1:-}" in
  "") ;;
  --check) check=1 ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

if ! command -v wat2wasm >/dev/null; then
  echo "build-wat: wat2wasm not found (Debian package wabt; scripts/setup.sh installs it)" >&2
  exit 1
fi
have=$(wat2wasm --version)
if [ "$have" != "$WABT_VERSION" ]; then
  msg="build-wat: wat2wasm is $have, want $WABT_VERSION: the .wasm files might not be byte-identical"
  if [ $check = 1 ]; then echo "$msg" >&2; exit 1; fi
  echo "$msg (building anyway)" >&2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Tracked fixtures and new ones not yet added (but not ignored files).
mapfile -t wats < <(git ls-files --cached --others --exclude-standard -- '*.wat' | sort -u)

fail=0
n=0
for src in "${wats[@]}"; do
  [ -f "$src" ] || continue # deleted in the work tree
  dst=${src%.wat}.wasm
  out=$tmp/$n.wasm
  if ! "${WAT2WASM[@]}" -o "$out" "$src"; then
    echo "build-wat: $src does not assemble" >&2
    fail=1
    continue
  fi
  n=$((n + 1))
  if [ $check = 0 ]; then
    cmp -s "$out" "$dst" 2>/dev/null || cp "$out" "$dst"
  elif [ ! -f "$dst" ]; then
    echo "build-wat: $dst is missing: run scripts/build-wat.sh and commit it" >&2
    fail=1
  elif ! cmp -s "$out" "$dst"; then
    echo "build-wat: $dst differs from an assembly of $src: run scripts/build-wat.sh and commit it" >&2
    fail=1
  fi
done

# A .wasm in a fixture directory without its .wat is a leftover.
for d in $(printf '%s\n' "${wats[@]}" | xargs -n1 dirname | sort -u); do
  for f in "$d"/*.wasm; do
    [ -e "$f" ] || continue
    if [ ! -f "${f%.wasm}.wat" ]; then
      echo "build-wat: $f has no source ${f%.wasm}.wat" >&2
      fail=1
    fi
  done
done

if [ $fail = 0 ]; then
  if [ $check = 1 ]; then echo "build-wat: all $n .wasm fixtures match their .wat"; else echo "build-wat: $n fixtures assembled"; fi
fi
exit $fail
