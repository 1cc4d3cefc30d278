#!/usr/bin/env bash
# Builds TAPP against a CUDA-enabled LibTorch (PyTorch's wheel or the LibTorch
# archive) into build-gpu/, for a GPU machine (issue 18). Debian's CPU LibTorch
# stays the default of scripts/build.sh; this is the second build of one source.
#
#   Where a Debian/Ubuntu package registry is reachable, one step:
#     scripts/build_gpu.sh                  installs the other dependencies with apt-get, builds
#   Where none is (a GPU machine lent with no registry), two:
#     scripts/build_gpu.sh --fetch DIR      here, with a registry: the .deb files of the other
#                                           dependencies into DIR (Debian 12's)
#     scripts/build_gpu.sh --debs DIR       there: unpacks DIR's .deb files into DIR/prefix and builds
#
# Options: --torch DIR   LibTorch's CMake folder (the one holding TorchConfig.cmake); default
#                        $Torch_DIR, else `python3 -c 'import torch; print(torch.utils.cmake_prefix_path)'`
#          --build DIR   the build folder (default build-gpu)
#          --jobs N      parallel compile jobs (default: the number of cores)
#          --configure-only   stop after CMake has found everything
# Then: (cd build-gpu && ctest --output-on-failure) runs every group; GPU-only
# tests run where a GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."

# The build's dependencies other than LibTorch, as Debian 12 packages (headers,
# CMake configs and the few shared libraries linked), plus what the tests run.
DEB_PACKAGES=(libgloo-dev libboost1.74-dev nlohmann-json3-dev libsqlite3-dev libsqlite3-0
              libcli11-dev doctest-dev libbenchmark-dev libbenchmark1debian
              libgoogle-perftools-dev libtcmalloc-minimal4 libgoogle-perftools4 libunwind8
              pkgconf pkgconf-bin libpkgconf3)

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() { echo "build_gpu.sh: $*" >&2; exit 2; }

fetch_dir="" debs_dir="" torch_dir="${Torch_DIR:-}" build_dir="build-gpu" jobs="$(nproc)" configure_only=0
while (($#)); do
  case "$1" in
    --fetch) fetch_dir="${2:?--fetch needs a folder}"; shift 2 ;;
    --debs) debs_dir="${2:?--debs needs a folder}"; shift 2 ;;
    --torch) torch_dir="${2:?--torch needs a folder}"; shift 2 ;;
    --build) build_dir="${2:?--build needs a folder}"; shift 2 ;;
    --jobs) jobs="${2:?--jobs needs a number}"; shift 2 ;;
    --configure-only) configure_only=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
done

if [ -n "$fetch_dir" ]; then
  mkdir -p "$fetch_dir"
  command -v apt-get >/dev/null || die "--fetch needs apt-get (a Debian or Ubuntu machine with a registry)"
  (cd "$fetch_dir" && apt-get download "${DEB_PACKAGES[@]}")
  echo "fetched $(ls "$fetch_dir"/*.deb | wc -l) packages into $fetch_dir; carry it and run: scripts/build_gpu.sh --debs $fetch_dir"
  exit 0
fi

cmake_args=(-DCMAKE_BUILD_TYPE=Release)
if [ -n "$debs_dir" ]; then
  [ -d "$debs_dir" ] || die "--debs: no folder '$debs_dir'"
  ls "$debs_dir"/*.deb >/dev/null 2>&1 || die "--debs: no .deb files in '$debs_dir' (make them with --fetch)"
  prefix="$(cd "$debs_dir" && pwd)/prefix"
  rm -rf "$prefix" && mkdir -p "$prefix"
  for f in "$debs_dir"/*.deb; do dpkg-deb -x "$f" "$prefix" || die "cannot unpack $f"; done
  multiarch="$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"
  libdir="$prefix/usr/lib/$multiarch"
  # CMake configs and headers from the prefix; tcmalloc's pkg-config file names /usr,
  # so the prefix is its sysroot; the binaries find the unpacked libraries by RPATH.
  cmake_args+=(-DCMAKE_PREFIX_PATH="$prefix/usr" -DCMAKE_BUILD_RPATH="$libdir")
  export PKG_CONFIG_PATH="$libdir/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$prefix"
  # A machine without pkg-config uses the unpacked pkgconf (its library beside it).
  if ! command -v pkg-config >/dev/null; then
    cmake_args+=(-DPKG_CONFIG_EXECUTABLE="$prefix/usr/bin/pkgconf")
    export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
elif command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  missing=()
  for p in "${DEB_PACKAGES[@]}" cmake pkg-config g++; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
  fi
fi

if [ -z "$torch_dir" ]; then
  python="${TAPP_PYTHON:-python3}"
  torch_dir="$("$python" -c 'import torch, os; print(os.path.join(torch.utils.cmake_prefix_path, "Torch"))' 2>/dev/null)" ||
    die "no LibTorch: pass --torch DIR (TorchConfig.cmake's folder) or use a python3 that imports torch"
  cmake_args+=(-DTAPP_PYTHON="$(command -v "$python")")
fi
[ -f "$torch_dir/TorchConfig.cmake" ] || die "--torch: no TorchConfig.cmake in '$torch_dir'"
echo "LibTorch: $torch_dir"

export CCACHE_BASEDIR="$PWD"
cmake -S . -B "$build_dir" -DTorch_DIR="$torch_dir" "${cmake_args[@]}"
((configure_only)) && exit 0
cmake --build "$build_dir" -j"$jobs"
echo "built into $build_dir; run the tests with: (cd $build_dir && ctest --output-on-failure -j$jobs)"
