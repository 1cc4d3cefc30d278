#!/usr/bin/env bash
# Installs, builds and runs every test (doctest suites, schema and browser tests) under ctest,
# then a bounded run of each fuzz target (scripts/fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
(cd build && ctest --output-on-failure -j2 --timeout 900)
# The parsers' fuzz targets, built with clang into build-fuzz/, FUZZ_SECONDS (45) each.
bash scripts/fuzz.sh
