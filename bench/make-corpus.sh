#!/bin/sh
# Builds the benchmark corpus: the SpiderMonkey sources shipped in the crate
# mozjs_sys 153.6.0-2 (about 175 MB, 10,459 files, with .gitignore files).
# Usage: bench/make-corpus.sh [DEST]   (default: target/bench-corpus); toold-bench runs it.
set -eu
DEST=${1:-target/bench-corpus}
CRATE_DIR=mozjs_sys-153.6.0-2
if [ -d "$DEST/$CRATE_DIR" ]; then echo "$DEST/$CRATE_DIR"; exit 0; fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
( cd "$W" && cargo init -q --name corpusfetch && cargo add -q mozjs_sys@=153.6.0-2 && cargo fetch -q )
CRATE=$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/mozjs_sys-153.6.0-2.crate | head -n 1)
echo "b0f69b286813322420ea4aeea951abe15fa14e27b23600300da6a2128ad6ef04  $CRATE" | sha256sum -c - >/dev/null
mkdir -p "$DEST"
tar -xzf "$CRATE" -C "$DEST"
# a git repository makes its .gitignore files take effect, as in a real checkout
( cd "$DEST/$CRATE_DIR" && git init -q )
echo "$DEST/$CRATE_DIR"
