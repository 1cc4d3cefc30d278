#!/usr/bin/env bash
# Installs, builds and runs every test (doctest suites, schema and browser tests) under ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build && ctest --output-on-failure -j2 --timeout 900
