#!/usr/bin/env bash
# Installs everything TAPP needs on Debian 12 (run as root). Safe to re-run.
set -euo pipefail
PKGS=(build-essential cmake ccache pkg-config
      libtorch-dev libgloo-dev libopenblas0-pthread
      libboost-dev nlohmann-json3-dev libsqlite3-dev sqlite3
      libbenchmark-dev doctest-dev libcli11-dev
      python3-torch python3-torchvision
      clang libfuzzer-14-dev libgoogle-perftools-dev
      chromium curl)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm (for ajv and playwright-core): Debian's only if none is present.
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}"
fi
# JavaScript test tools (ajv for JSON Schema, playwright-core for the browser test).
if [ -f tests/js/package.json ] && [ ! -d tests/js/node_modules ]; then
  (cd tests/js && npm install --no-audit --no-fund --silent)
fi
