#!/usr/bin/env bash
# Installs what toold-bench compares toold with: ripgrep (`rg`) and fd (Debian's `fd-find`,
# whose program is `fdfind`), from Debian's packages, when they are missing. Needs root (or
# sudo) for apt-get; the harness records the versions it finds.
#
#   bash bench/setup.sh
set -euo pipefail

missing=()
command -v rg >/dev/null 2>&1 || missing+=(ripgrep)
command -v fd >/dev/null 2>&1 || command -v fdfind >/dev/null 2>&1 || missing+=(fd-find)
if [ ${#missing[@]} -eq 0 ]; then
  echo "bench setup: rg and fd are installed"
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
echo "bench setup: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
