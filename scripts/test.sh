#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs what the tests need
# (scripts/setup.sh), then go test over every package. Extra arguments are
# passed to go test (e.g. scripts/test.sh -run TestX ./runtime/).
set -euo pipefail
cd "$(dirname "$0")/.."

# Each phase says when it starts, how long it usually takes (first run on
# a fresh 2-core machine / later runs, measured), and how long it took,
# on stderr.
phase() {
  local name=$1 expect=$2 start=$SECONDS
  shift 2
  echo "test.sh: $name ... (usually $expect)" >&2
  "$@"
  echo "test.sh: $name: took $((SECONDS - start)) s" >&2
}

phase "setup (Debian packages)" "2-4 min the first time, seconds after" scripts/setup.sh
[ -x scripts/setup-npm.sh ] && phase "setup (npm packages)" "1 min the first time, seconds after" scripts/setup-npm.sh
# The cluster tests' Temporal dev server (built once into .cache/) and
# PostgreSQL; without them those tests skip, saying so (and fail under
# AGRUN_REQUIRE_CLUSTER=1, as in .ci/run).
phase "setup (Temporal dev server, PostgreSQL)" "6-15 min the first time (it builds Temporal), seconds after" scripts/setup-cluster.sh

# Test guests and the wazero compilation cache are shared by every test
# binary of the run (see internal/testing/testguest).
export AGRUN_TEST_CACHE="${AGRUN_TEST_CACHE:-$PWD/.cache/test}"

# -tags cluster: the whole suite includes the cluster wiring of cmd/agrun
# (a plain build leaves it out: docs/ARCHITECTURE.md, "Build cost").
if [ $# -gt 0 ]; then
  exec go test -tags cluster -count=1 "$@"
fi
# go test prints each package's line in the order of the packages, so a
# long package early in the list (cmd/agrun) holds back the lines of all
# that end after it: minutes without a line (issue 31). While go test
# runs, a line a minute names the test binaries still running and for
# how long.
gotest() {
  local start=$SECONDS rc=0
  go test "$@" &
  local pid=$!
  (
    while sleep 60; do
      kill -0 "$pid" 2>/dev/null || exit 0
      running=$(ps -o etimes=,args= --ppid "$pid" 2>/dev/null |
        awk '{ n = $2; sub(/.*\//, "", n); if (n ~ /\.test$/) { printf "%s%s %d s", sep, substr(n, 1, length(n) - 5), $1; sep = ", " } }')
      echo "test.sh: go test: $((SECONDS - start)) s so far; running: ${running:-none (compiling)}" >&2
    done
  ) &
  local watcher=$!
  wait "$pid" || rc=$?
  kill "$watcher" 2>/dev/null || true
  return "$rc"
}
phase "go test ./..." "4.5-5 min on a busy 2-core machine, plus 3-5 min to compile on an empty Go build cache" gotest -tags cluster -count=1 -timeout 20m ./...
