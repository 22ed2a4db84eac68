#!/usr/bin/env bash
# Installs the real MCP servers the tests run (tests/tests/mcp_real_servers.rs) and the MCP client
# library and the MCP Inspector that tests/tests/mcp_serve.rs drives toold with, from the npm and
# Python package registries, into tests/mcp_servers/installed/ (not committed). Versions are
# pinned: a test asserts what a given release lists. Run by .ci/run; run it by hand to run those
# tests locally (they skip, saying so, while it has not been run).
set -euo pipefail
cd "$(dirname "$0")"
target=installed
mkdir -p "$target"

npm install --prefix "$target/node" --no-audit --no-fund --loglevel=error \
  @modelcontextprotocol/server-everything@2026.8.31 \
  @modelcontextprotocol/server-filesystem@2026.8.31 \
  @modelcontextprotocol/server-memory@2026.8.31 \
  @modelcontextprotocol/inspector@2.12.0

python3 -m venv "$target/python"
# mcp: the Python MCP client library that tests/mcp_servers/host.py drives `toold mcp serve` with.
"$target/python/bin/pip" install --quiet --disable-pip-version-check mcp-server-time==2026.10.19 mcp==2.3.0

ls "$target/node/node_modules/.bin/"mcp-server-* "$target/node/node_modules/.bin/mcp-inspector" \
  "$target/python/bin/mcp-server-time"
