#!/usr/bin/env python3
"""Fails when a part includes a part at its own layer or above (DESIGN.md: includes run downward).

The folders are the layering. A file may include headers of its own folder and of
folders with a lower layer number; parts on the same layer (model/core,
simulator/profiler, runtime/planners) are independent of each other, except
core, which speaks model's vocabulary (a Placement is checked against a LayerGraph).
"""
import pathlib
import re
import sys

LAYERS = {"common": 1, "model": 2, "core": 2, "simulator": 3, "profiler": 3,
          "runtime": 4, "planners": 4, "placer": 5, "service": 6}
ALLOWED_SIDEWAYS = {("core", "model")}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([a-z_]+)/', re.M)


def violations(root):
    found = []
    for part, layer in LAYERS.items():
        for path in sorted((root / part).rglob("*")):
            if path.suffix not in (".h", ".cpp", ".cc"):
                continue
            for target in INCLUDE.findall(path.read_text(errors="replace")):
                if target == part or target not in LAYERS:
                    continue
                if LAYERS[target] < layer or (part, target) in ALLOWED_SIDEWAYS:
                    continue
                found.append(f"{path.relative_to(root)}: includes {target}/ (layer {LAYERS[target]}) "
                             f"from {part}/ (layer {layer})")
    return found


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    missing = [p for p in LAYERS if not (root / p).is_dir()]
    if missing:
        print("missing part folders: " + ", ".join(missing))
        return 1
    bad = violations(root)
    for line in bad:
        print(line)
    print(f"{len(LAYERS)} parts checked, {len(bad)} upward or sideways includes")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
