#!/usr/bin/env bash
# Installs dependencies and builds everything into build/ (binaries in build/bin/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
# ccache hits across clones and worktrees of this repository (paths relative to it).
export CCACHE_BASEDIR="$PWD"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2
