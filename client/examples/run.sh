#!/usr/bin/env bash
# Runs the client examples against a real daemon: builds `toold`, starts `toold serve` on a
# socket in a private temporary directory (its own state and config), runs the Node example
# (vscode-jsonrpc, Content-Length framing, an approval answered) and the Python example
# (standard library, NDJSON), then stops the daemon with SIGTERM and checks it exits 0.
# Any failure exits non-zero. Needs cargo, node (18 or later) with npm, and python3.
#
#   bash client/examples/run.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
EXAMPLES="$ROOT/client/examples"
cd "$ROOT"

say() { printf 'examples: %s\n' "$*"; }

DIR=""
PID=""
LOG=""
fail() {
  printf 'examples: FAIL: %s\n' "$*" >&2
  if [ -n "$LOG" ] && [ -s "$LOG" ]; then
    printf -- '--- the daemon'"'"'s log (%s):\n' "$LOG" >&2
    cat "$LOG" >&2
    printf -- '---\n' >&2
  fi
  exit 1
}
cleanup() {
  if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
    kill -KILL "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
  fi
  if [ -n "$DIR" ]; then
    rm -rf "$DIR"
  fi
}
trap cleanup EXIT

for tool in cargo node npm python3; do
  command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed"
done
node_major="$(node -p 'process.versions.node.split(".")[0]')"
[ "$node_major" -ge 18 ] || fail "node 18 or later is needed (found $(node --version))"

say "building the daemon (cargo build -p toold)"
cargo build -p toold --locked
TARGET_DIR="$(cargo metadata --format-version 1 --no-deps --locked |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
TOOLD="$TARGET_DIR/debug/toold"
[ -x "$TOOLD" ] || fail "$TOOLD was not built"

DIR="$(mktemp -d)"
chmod 700 "$DIR"
mkdir -m 700 "$DIR/run" "$DIR/state" "$DIR/config" "$DIR/home" "$DIR/tmp"
# Commands may use the network here, so the sandbox does not decide for them: a command that
# no rule allows asks, and the Node example answers that approval.
mkdir -m 700 "$DIR/config/toold"
printf '[sandbox]\nnetwork = true\n' >"$DIR/config/toold/config.toml"
SOCKET="$DIR/run/toold.sock"
LOG="$DIR/toold.log"

env -u TOOLD_SOCKET -u LISTEN_FDS -u LISTEN_PID -u LISTEN_FDNAMES -u NOTIFY_SOCKET \
  XDG_STATE_HOME="$DIR/state" XDG_CONFIG_HOME="$DIR/config" HOME="$DIR/home" \
  "$TOOLD" serve --allow-root --socket "$SOCKET" </dev/null >"$LOG" 2>&1 &
PID=$!

for _ in $(seq 100); do
  [ -S "$SOCKET" ] && break
  kill -0 "$PID" 2>/dev/null || fail "the daemon exited before listening"
  sleep 0.1
done
[ -S "$SOCKET" ] || fail "no socket at $SOCKET after 10 s"
say "daemon $PID listening on $SOCKET"

say "npm ci (client/examples/node)"
(cd "$EXAMPLES/node" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) || fail "npm ci failed"

# The examples find the socket the way every client does: TOOLD_SOCKET first. Their session
# directories go under $DIR.
export TOOLD_SOCKET="$SOCKET" TMPDIR="$DIR/tmp"

say "node example (vscode-jsonrpc, Content-Length framing, approval answered)"
node "$EXAMPLES/node/toold_example.js" || fail "the node example failed"

say "python example (standard library, NDJSON, allowed by a session rule)"
python3 "$EXAMPLES/python/toold_example.py" || fail "the python example failed"

kill -TERM "$PID"
for _ in $(seq 300); do
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$PID" 2>/dev/null && fail "the daemon did not exit within 30 s of SIGTERM"
status=0
wait "$PID" || status=$?
PID=""
[ "$status" -eq 0 ] || fail "the daemon exited with status $status on SIGTERM"
if grep -q 'panicked' "$LOG"; then
  fail "the daemon's log reports a panic"
fi
say "daemon stopped by SIGTERM, exit status 0"
say "all examples passed"
