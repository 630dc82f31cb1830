#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs what the tests need
# (scripts/setup.sh), then go test over every package. Extra arguments are
# passed to go test (e.g. scripts/test.sh -run TestX ./runtime/).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
[ -x scripts/setup-npm.sh ] && scripts/setup-npm.sh
# The cluster tests' Temporal dev server (built once into .cache/) and
# PostgreSQL; without them those tests skip, saying so (and fail under
# AGRUN_REQUIRE_CLUSTER=1, as in .ci/run).
scripts/setup-cluster.sh

# Test guests and the wazero compilation cache are shared by every test
# binary of the run (see internal/testing/testguest).
export AGRUN_TEST_CACHE="${AGRUN_TEST_CACHE:-$PWD/.cache/test}"

# -tags cluster: the whole suite includes the cluster wiring of cmd/agrun
# (a plain build leaves it out: docs/ARCHITECTURE.md, "Build cost").
if [ $# -gt 0 ]; then
  exec go test -tags cluster -count=1 "$@"
fi
go test -tags cluster -count=1 -timeout 20m ./...
