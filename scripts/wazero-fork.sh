#!/usr/bin/env bash
# Builds third_party/wazero, the copy of wazero that go.mod's replace
# points at: the upstream release named by go.mod's require, with
# third_party/wazero.patch applied (docs/RATIONALE.md, "wazero, patched":
# why, the measured gain, and when to drop it).
#
#   scripts/wazero-fork.sh            rebuild third_party/wazero from the
#                                     release go.mod requires
#   scripts/wazero-fork.sh v1.13.0    move to another release: apply the
#                                     patch to it (fix the patch if it no
#                                     longer applies), run wazero's own tests
#                                     of what it touches and the spec
#                                     tests, then set go.mod's require
#   scripts/wazero-fork.sh --check    rebuild into a temporary directory and
#                                     fail if third_party/wazero differs
#
# The copy keeps what a build needs (the non-test Go and assembly files,
# go.mod, go.sum, LICENSE, NOTICE); the tests run on the whole patched
# release in a temporary directory before anything is copied.
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
version=""
case "${1:-}" in
--check) check=1 ;;
"") ;;
*) version=$1 ;;
esac
if [ -z "$version" ]; then
  version=$(go list -m -f '{{.Version}}' github.com/tetratelabs/wazero)
fi

src=$(GOFLAGS=-mod=mod GOWORK=off go mod download -json "github.com/tetratelabs/wazero@$version" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$src" ] || { echo "wazero-fork: could not download wazero $version" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp"; rm -rf "$tmp"' EXIT
cp -r "$src" "$tmp/full"
chmod -R u+w "$tmp/full"
(cd "$tmp/full" && git apply -p1 "$OLDPWD/third_party/wazero.patch") || {
  echo "wazero-fork: third_party/wazero.patch does not apply to wazero $version: port it by hand" >&2
  exit 1
}

if [ "$check" = 0 ]; then
  echo "wazero-fork: testing the patched wazero $version" >&2
  (cd "$tmp/full" && GOWORK=off GOFLAGS=-mod=mod go test -count=1 . ./internal/wasm/... ./internal/engine/wazevo/... \
    ./internal/integration_test/spectest/... ./internal/integration_test/filecache/...)
fi

# What a build needs, nothing else: no tests, test data, examples, the
# CLI or the site.
mkdir "$tmp/copy"
(cd "$tmp/full" && find . -type f \( \( -name '*.go' ! -name '*_test.go' \) -o -name '*.s' -o -name go.mod -o -name go.sum -o -name LICENSE -o -name NOTICE \) \
  -not -path '*/testdata/*' -not -path './examples/*' -not -path './cmd/*' -not -path './site/*' \
  -not -path './internal/integration_test/*' -not -path './internal/testing/*' -not -path '*/example/*' -print0 |
  xargs -0 cp --parents -t "$tmp/copy")

if [ "$check" = 1 ]; then
  if ! diff -r "$tmp/copy" third_party/wazero >/dev/null; then
    echo "wazero-fork: third_party/wazero is not wazero $version with third_party/wazero.patch: run scripts/wazero-fork.sh" >&2
    diff -r "$tmp/copy" third_party/wazero | head -20 >&2
    exit 1
  fi
  exit 0
fi

rm -rf third_party/wazero
cp -r "$tmp/copy" third_party/wazero
go mod edit -require="github.com/tetratelabs/wazero@$version" -replace=github.com/tetratelabs/wazero=./third_party/wazero
go mod tidy
echo "wazero-fork: third_party/wazero is wazero $version with the patch; now run the runtime tests and the bench (docs/RATIONALE.md)" >&2
