#!/usr/bin/env python3
"""Fails unless every binary that trains or profiles runs with tcmalloc (issue 14).

Each binary's --version names the allocator whose malloc the process calls
(common/allocator.h: dlsym + dladdr, so it reports what runs, not what was
intended); with glibc's malloc a vgg16 step ran 2.5x slower. Usage:
check_allocator.py BIN_DIR
"""
import pathlib
import subprocess
import sys

BINARIES = ["tapp-worker", "tapp-cli", "tapp-server"]


def main():
    bin_dir = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "build/bin")
    failed = 0
    for name in BINARIES:
        run = subprocess.run([str(bin_dir / name), "--version"], capture_output=True, text=True, timeout=60)
        out = (run.stdout + run.stderr).strip()
        ok = run.returncode == 0 and "allocator: tcmalloc" in out
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {out}")
        failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
