"""How many of torchvision 0.14's classification models TAPP imports and trains from TorchScript.

usage: /usr/bin/python3 bench/torchvision_coverage.py --cli build/bin/tapp-cli --out DIR
           [--models resnet18,vit_b_16] [--timeout 600] [--max-params 200000000] [--script]

For every model of torchvision.models.list_models(module=torchvision.models):
  1. build it (random weights), trace it in eval mode (torch.jit.trace; --script: torch.jit.script,
     googlenet and inception_v3 without their auxiliary heads, which a scripted forward returns
     in a tuple that the import drops) at 64x64, or at its fixed size when it refuses 64 (224,
     inception_v3 299), save it, count its parameters;
  2. `tapp-cli export-model FILE --input-size S` (the automatic import: the op-by-op mapping,
     else the module's own code per layer) and compare the layers' parameter sum with PyTorch's;
  3. `tapp-cli run FILE --strategy single --steps 1 --warmup 0 --batch 2` on a local worker:
     one training step on the runtime.
Models over --max-params are listed as skipped (a 2-core host, 3 copies of the weights per step).
Writes DIR/coverage.json and DIR/coverage.md (a Markdown table); each .pt is deleted after its run.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from save_torchvision import without_aux_heads  # noqa: E402  (beside this script)


def first_line(text, limit=160):
    lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
    line = lines[-1] if lines else ""
    for l in lines:
        if "error" in l.lower() or "tapp-cli" in l or "not supported" in l:
            line = l
            break
    return line[:limit]


def save_model(name, path, script=False):
    model = torchvision.models.get_model(name, weights=None, **(without_aux_heads(name) if script else {}))
    model.eval()
    sizes = [64, 299 if name == "inception_v3" else 224]
    last = None
    for size in sizes:
        try:
            with torch.no_grad():
                model(torch.randn(1, 3, size, size))
            if script:
                saved = torch.jit.script(model)
            else:
                saved = torch.jit.trace(model, torch.randn(1, 3, size, size), check_trace=False)
            saved.save(path)
            return size, sum(p.numel() for p in model.parameters()), None
        except Exception as e:  # the model refuses this size: try its default
            last = e
    return None, sum(p.numel() for p in model.parameters()), "python: " + str(last).splitlines()[0][:160]


def run(cmd, timeout):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return 124, "", "timed out after %d s" % timeout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--max-params", type=float, default=2e8)
    ap.add_argument("--script", action="store_true", help="save with torch.jit.script instead of tracing")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cluster = os.path.join(a.out, "cluster1.json")
    with open(cluster, "w") as f:
        json.dump({"name": "one-cpu", "devices": [{"name": "cpu0", "kind": "cpu", "threads": 1, "memory_mb": 16384}],
                   "default_link": {"bandwidth_mbps": 10000, "latency_ms": 0.05}}, f)
    names = a.models.split(",") if a.models else torchvision.models.list_models(module=torchvision.models)
    rows = []
    for name in names:
        t0 = time.time()
        row = {"model": name}
        path = os.path.join(a.out, name + ".pt")
        size, params, err = save_model(name, path, a.script)
        row.update(input_size=size, params=params)
        if params > a.max_params:
            row.update(imported=False, exact=False, trained=False, error="skipped: over --max-params")
        elif err:
            row.update(imported=False, exact=False, trained=False, error=err)
        else:
            js = os.path.join(a.out, name + ".json")
            rc, out, er = run([a.cli, "export-model", path, "--input-size", str(size), "--out", js], a.timeout)
            row["imported"] = rc == 0
            if rc == 0:
                g = json.load(open(js))
                layers = g["layers"]
                ops = {l["op"] for l in layers}
                got = sum(l.get("attrs", {}).get("params", 0) for l in layers if l["op"] == "torchscript")
                # The op-by-op path's JSON holds no parameter counts: not compared ("-" in the table).
                generic = ops == {"torchscript"}
                row.update(layers=len(layers), path="layers" if generic else "ops",
                           imported_params=got if generic else None, exact=(got == params) if generic else None)
                rc, out, er = run([a.cli, "run", path, "--devices", cluster, "--strategy", "single", "--steps", "1",
                                   "--warmup", "0", "--batch", "2", "--input-size", str(size), "--timeout",
                                   str(a.timeout), "--json"], a.timeout + 60)
                row["trained"] = rc == 0
                if rc != 0:
                    row["error"] = "run: " + first_line(er + out)
                os.remove(js)
            else:
                row.update(exact=False, trained=False, error="import: " + first_line(er))
        if os.path.exists(path):
            os.remove(path)
        row["seconds"] = round(time.time() - t0, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
        with open(os.path.join(a.out, "coverage.json"), "w") as f:
            json.dump(rows, f, indent=1)
    write_table(rows, os.path.join(a.out, "coverage.md"))


# `python3 bench/torchvision_coverage.py --table DIR/coverage.json` rewrites the table of a cut-short run.
def write_table(rows, path):
    ok = [r for r in rows if r.get("imported") and r.get("trained") and r.get("exact") is not False]
    lines = ["%d of %d models import (parameter counts exact where compared) and train one step on the runtime."
             % (len(ok), len(rows)),
             "", "| model | input | parameters | layers | import | exact params | one training step | what stops it |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        yes = lambda v: "yes" if v else ("-" if v is None else "no")
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["model"], r.get("input_size") or "-", "{:,}".format(r["params"]), r.get("layers", "-"),
            (r.get("path", "") + " " + yes(r.get("imported"))).strip(), yes(r.get("exact")), yes(r.get("trained")),
            r.get("error", "").replace("|", "/")))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--table":
        rows = json.load(open(sys.argv[2]))
        for r in rows:
            if r.get("path") == "ops":
                r["exact"] = None
        write_table(rows, os.path.join(os.path.dirname(sys.argv[2]), "coverage.md"))
        sys.exit(0)
    sys.exit(main())
