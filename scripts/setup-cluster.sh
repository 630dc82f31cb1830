#!/usr/bin/env bash
# Provides what the cluster tests (package cluster, issue 21) need, once per
# machine, and says where they are:
#   - the Temporal CLI's dev server, built from source with the Go module
#     proxy into .cache/temporal/bin/temporal (about 4.5 minutes the first
#     time, then reused; `@latest` does not build: a replace directive of a
#     nested module, so the version is pinned);
#   - PostgreSQL's server binaries (Debian's postgresql package): the tests
#     start their own server with initdb + pg_ctl on a loopback port in a
#     temporary directory.
# Safe to run repeatedly. A failure is reported and leaves the tests to
# skip with a message naming what is missing (scripts/test.sh runs this;
# .ci/run requires both: AGRUN_REQUIRE_CLUSTER=1 makes a skip a failure).
set -uo pipefail
cd "$(dirname "$0")/.."

TEMPORAL_CLI_VERSION=v1.5.1
bin="$PWD/.cache/temporal/bin"
stamp="$bin/.version"
if [ ! -x "$bin/temporal" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$TEMPORAL_CLI_VERSION" ]; then
  echo "setup-cluster: building the Temporal dev server ($TEMPORAL_CLI_VERSION, a few minutes, once)" >&2
  mkdir -p "$bin"
  if GOBIN="$bin" GOFLAGS=-mod=mod go install "github.com/temporalio/cli/cmd/temporal@$TEMPORAL_CLI_VERSION"; then
    echo "$TEMPORAL_CLI_VERSION" > "$stamp"
  else
    echo "setup-cluster: could not build the Temporal CLI; the cluster end-to-end tests will skip" >&2
  fi
fi

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  echo "setup-cluster: installing postgresql" >&2
  if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null; }; then
    echo "setup-cluster: could not install postgresql; the PostgreSQL store tests will skip" >&2
  fi
fi
exit 0
