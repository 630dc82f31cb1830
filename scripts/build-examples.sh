#!/usr/bin/env bash
# Rebuilds the example tools, testdata/<tool>.wasm, from their sources in
# testdata/<tool>/ and packs each with its manifest (manifest.toml or
# manifest.json beside the source), reproducibly: the same sources and
# toolchain give the same bytes on any machine.
#
#   scripts/build-examples.sh           rebuild every testdata/*.wasm in place
#   scripts/build-examples.sh --check   rebuild into a temporary directory and
#                                       fail if a committed .wasm differs (CI)
#
# Go tools (testdata/<tool>/main.go): GOOS=wasip1 GOARCH=wasm, built as
# reactors (-buildmode=c-shared: agrun runs _initialize once and starts
# every call from a snapshot; guest-sdk/ABI.md), CGO off, -trimpath,
# -buildvcs=false, an empty build id, the Go toolchain pinned by
# GOTOOLCHAIN below. C tools (testdata/<tool>/main.c): clang 14 with
# wasi-libc (Debian: clang lld wasi-libc libclang-rt-14-dev-wasm32; see
# scripts/setup.sh), fixed flags. Packing uses `agrun pack` itself
# (built from this tree).
#
# Extism plug-ins (testdata/plugins/<name>/main.go, in testdata/plugins'
# own module with Extism's Go PDK; or testdata/plugins/<name>/main.c with
# Extism's C PDK header beside it, built as a reactor) are built the same
# way into testdata/plugins/<name>.wasm, and not packed: a plug-in has no
# manifest (agrun.toml describes it).
set -euo pipefail
cd "$(dirname "$0")/.."

GO_TOOLCHAIN=go1.26.8      # the bytes of a Go tool depend on the toolchain
CLANG_MAJOR=14             # likewise for the C tool
CLANG=${CLANG:-clang}
WASI_SYSROOT=${WASI_SYSROOT:-/usr}

check=0
case "${1:-}" in
  "") ;;
  --check) check=1 ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

# Pin everything that changes a Go build's output.
export GOTOOLCHAIN=$GO_TOOLCHAIN GOFLAGS=-mod=readonly CGO_ENABLED=0 GOEXPERIMENT= GOWASM=
unset GOOS GOARCH
GO_BUILD=(go build -buildmode=c-shared -trimpath -buildvcs=false -ldflags=-buildid=)
C_FLAGS=(--target=wasm32-wasi "--sysroot=$WASI_SYSROOT" -O2 -std=c11 -Wall -Wextra -Werror
         -fno-ident "-ffile-prefix-map=$PWD=." -Wl,--strip-debug)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=testdata
[ $check = 1 ] && out=$tmp/out && mkdir -p "$out"

if [ "$(go env GOVERSION)" != "$GO_TOOLCHAIN" ]; then
  echo "build-examples: go is $(go env GOVERSION), want $GO_TOOLCHAIN" >&2
  exit 1
fi
clang_major=$("$CLANG" -dumpversion 2>/dev/null | cut -d. -f1 || true)
if [ "$clang_major" != "$CLANG_MAJOR" ]; then
  msg="build-examples: $CLANG is version ${clang_major:-?}, want $CLANG_MAJOR: C tools would not be byte-identical"
  if [ $check = 1 ]; then echo "$msg" >&2; exit 1; fi
  echo "$msg (building anyway)" >&2
fi

go build -o "$tmp/agrun" ./cmd/agrun

tools=()
for dir in testdata/*/; do
  dir=${dir%/}
  name=${dir#testdata/}
  manifest=""
  for m in "$dir/manifest.toml" "$dir/manifest.json"; do
    [ -f "$m" ] && manifest=$m && break
  done
  if [ -f "$dir/main.go" ]; then
    GOOS=wasip1 GOARCH=wasm "${GO_BUILD[@]}" -o "$tmp/$name.wasm" "./$dir"
  elif [ -f "$dir/main.c" ]; then
    "$CLANG" "${C_FLAGS[@]}" -o "$tmp/$name.wasm" "$dir/main.c"
  else
    continue # not a tool (no main.go or main.c)
  fi
  if [ -z "$manifest" ]; then
    echo "build-examples: $dir has no manifest.toml or manifest.json" >&2
    exit 1
  fi
  "$tmp/agrun" pack -m "$manifest" "$tmp/$name.wasm" -o "$out/$name.wasm" >/dev/null
  tools+=("$name")
done

plugins=()
mkdir -p "$out/plugins"
plugins_out=$(cd "$out/plugins" && pwd)
for dir in testdata/plugins/*/; do
  dir=${dir%/}
  name=${dir#testdata/plugins/}
  if [ -f "$dir/main.go" ]; then
    (cd testdata/plugins && GOOS=wasip1 GOARCH=wasm "${GO_BUILD[@]}" -o "$plugins_out/$name.wasm" "./$name")
  elif [ -f "$dir/main.c" ]; then
    # Extism's C PDK (the header vendored beside main.c), as a reactor.
    "$CLANG" "${C_FLAGS[@]}" -mexec-model=reactor -o "$plugins_out/$name.wasm" "$dir/main.c"
  else
    continue
  fi
  plugins+=("plugins/$name")
done

if [ $check = 0 ]; then
  for t in "${tools[@]}" "${plugins[@]}"; do
    printf '%-20s %9d bytes  sha256 %s\n' "$t" "$(wc -c <"testdata/$t.wasm")" "$(sha256sum "testdata/$t.wasm" | cut -d' ' -f1)"
  done
  exit 0
fi

fail=0
for t in "${tools[@]}" "${plugins[@]}"; do
  if [ ! -f "testdata/$t.wasm" ]; then
    echo "build-examples: testdata/$t.wasm is missing: run scripts/build-examples.sh and commit it" >&2
    fail=1
  elif ! cmp -s "$out/$t.wasm" "testdata/$t.wasm"; then
    echo "build-examples: testdata/$t.wasm differs from a build of testdata/$t/: run scripts/build-examples.sh and commit it" >&2
    fail=1
  fi
done
for f in testdata/*.wasm; do
  [ -e "$f" ] || continue
  t=$(basename "$f" .wasm)
  if [ ! -f "$out/$t.wasm" ]; then
    echo "build-examples: $f has no source directory testdata/$t/" >&2
    fail=1
  fi
done
for f in testdata/plugins/*.wasm; do
  [ -e "$f" ] || continue
  t=$(basename "$f" .wasm)
  if [ ! -f "$out/plugins/$t.wasm" ]; then
    echo "build-examples: $f has no source directory testdata/plugins/$t/" >&2
    fail=1
  fi
done
[ $fail = 0 ] && echo "build-examples: all ${#tools[@]} example tools and ${#plugins[@]} plug-ins match their sources"
exit $fail
