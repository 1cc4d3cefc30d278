"""`tapp-cli export --format pipe` against PyTorch's own Pipe (python3-torch 1.13).

usage: check_pipe_export.py TAPP_CLI WORK_DIR

For zoo models that are chains (alexnet_cifar, vgg5): writes the model's layer
graph (`tapp-cli export-model`), plans placements over three devices
(`tapp-cli plan --planner dp|uniform|params --out`), exports each (`tapp-cli export
--format pipe --json`), builds the same model in PyTorch as an nn.Sequential
whose children are the graph's layers by name, groups the children by the
exported `balance` as torchgpipe's `split_module` does (consecutive children,
balance[k] of them for partition k; Pipe in torch 1.13 no longer takes
`balance`, it splits where the children's device changes and makes every
top-level CPU child its own partition, so the groups are its top-level
children) and wraps it in torch.distributed.pipeline.sync.Pipe (RPC
initialised on 127.0.0.1). Checks, for every partition Pipe made: the layers
it holds (names, by module identity), their types, and its parameter count
against the placement file's layers of that stage and TAPP's parameter bytes
for it; then one forward through the Pipe equals the unsplit model's, and a
backward reaches every partition. Exit 0 pass, 1 fail, 77 skip (no torch).
"""
import json
import os
import socket
import subprocess
import sys

try:
    import torch
    import torch.nn as nn
    from collections import OrderedDict
except ImportError as e:  # pragma: no cover - depends on the machine
    print("skipped: python3 has no torch (%s)" % e)
    sys.exit(77)
try:  # removed from PyTorch in 2.4 (torch.distributed.pipelining replaced it)
    from torch.distributed.pipeline.sync import Pipe
except ImportError as e:  # pragma: no cover - depends on the machine
    print("skipped: torch %s has no torch.distributed.pipeline.sync.Pipe (%s)" % (torch.__version__, e))
    sys.exit(77)

CLUSTER = {
    "name": "three",
    "devices": [{"name": n, "memory_mb": 4096} for n in ("a", "b", "c")],
    "default_link": {"bandwidth_mbps": 1000, "latency_ms": 0.1},
}

MODULE_TYPE = {  # layer graph op -> the torch.nn class built for it
    "conv2d": nn.Conv2d, "linear": nn.Linear, "relu": nn.ReLU, "relu6": nn.ReLU6, "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid, "maxpool2d": nn.MaxPool2d, "avgpool2d": nn.AvgPool2d,
    "adaptive_avgpool2d": nn.AdaptiveAvgPool2d, "flatten": nn.Flatten, "dropout": nn.Dropout,
    "batchnorm2d": nn.BatchNorm2d, "identity": nn.Identity,
}


def pair(v):
    return tuple(v) if isinstance(v, list) else (v, v)


def build_layer(layer, x):
    """The torch module for one layer of the graph, given a sample of its input."""
    op, a = layer["op"], layer.get("attrs", {})
    if op == "conv2d":
        return nn.Conv2d(x.shape[1], a["out"], pair(a.get("kernel", 1)), pair(a.get("stride", 1)),
                         pair(a.get("padding", 0)), groups=a.get("groups", 1), bias=a.get("bias", True))
    if op == "linear":
        return nn.Linear(x.shape[1], a["out"], bias=a.get("bias", True))
    if op in ("maxpool2d", "avgpool2d"):
        kernel = pair(a.get("kernel", 1))
        return MODULE_TYPE[op](kernel, pair(a.get("stride", kernel)), pair(a.get("padding", 0)),
                               ceil_mode=a.get("ceil_mode", False))
    if op == "adaptive_avgpool2d":
        return nn.AdaptiveAvgPool2d(pair(a.get("kernel", 1)))
    if op == "batchnorm2d":
        return nn.BatchNorm2d(x.shape[1], eps=a.get("eps", 1e-5))
    if op == "dropout":
        return nn.Dropout(a.get("p", 0.5))
    if op == "flatten":
        return nn.Flatten(1)
    if op in MODULE_TYPE:
        return MODULE_TYPE[op]()
    raise SystemExit("layer %s: op %s has no torch module in this test" % (layer["name"], op))


def sequential_from_graph(graph):
    """The graph (a chain) as nn.Sequential(OrderedDict(name -> module))."""
    x = torch.zeros([2] + graph["input_shape"])
    children = OrderedDict()
    previous = None
    for layer in graph["layers"]:
        expected_inputs = [] if previous is None else [previous]
        if layer["inputs"] != expected_inputs:
            raise SystemExit("layer %s reads %s: this test mirrors chains only" % (layer["name"], layer["inputs"]))
        module = build_layer(layer, x)
        with torch.no_grad():
            x = module.eval()(x)
        children[layer["name"]] = module
        previous = layer["name"]
    return nn.Sequential(children)


def split_by_balance(flat, balance):
    """torchgpipe's split_module: consecutive children, balance[k] for partition k."""
    if sum(balance) != len(flat) or any(b <= 0 for b in balance):
        raise SystemExit("balance %s does not split %d layers" % (balance, len(flat)))
    items = list(flat.named_children())
    stages, start = [], 0
    for count in balance:
        stages.append(nn.Sequential(OrderedDict(items[start:start + count])))
        start += count
    return nn.Sequential(*stages)


def run(args, **kw):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, **kw)
    if r.returncode != 0:
        raise SystemExit("%s: exit %d\n%s" % (" ".join(args), r.returncode, r.stderr))
    return r.stdout


def expected_stages(placement, graph):
    """The placement file's own stages: runs of layers (graph order) on the same group devices."""
    stages = []
    for layer in graph["layers"]:
        devices = placement["groups"][placement["layers"][layer["name"]]]
        if stages and stages[-1][0] == devices:
            stages[-1][1].append(layer["name"])
        else:
            stages.append((devices, [layer["name"]]))
    return stages


def check(cli, work, model, planner, failures):
    graph_path = os.path.join(work, model + ".json")
    run([cli, "export-model", model, "--out", graph_path])
    with open(graph_path) as f:
        graph = json.load(f)
    cluster_path = os.path.join(work, "cluster.json")
    with open(cluster_path, "w") as f:
        json.dump(CLUSTER, f)
    placement_path = os.path.join(work, "%s_%s_placement.json" % (model, planner))
    run([cli, "plan", model, "--devices", cluster_path, "--planner", planner, "--costs", "estimated",
         "--batch", "8", "--out", placement_path])
    with open(placement_path) as f:
        placement = json.load(f)
    doc = json.loads(run([cli, "export", placement_path, "--model", model, "--devices", cluster_path,
                          "--format", "pipe", "--costs", "estimated", "--batch", "8", "--json"]))
    exported = doc["formats"]["pipe"]
    balance = exported["balance"]
    stages = expected_stages(placement, graph)
    what = "%s / %s (balance %s)" % (model, planner, balance)
    if len(stages) < 2:
        failures.append("%s: the planner made one stage; the test needs a pipeline" % what)
        return

    failures_before = len(failures)
    torch.manual_seed(0)
    flat = sequential_from_graph(graph)
    name_of = {id(m): n for n, m in flat.named_children()}
    pipe = Pipe(split_by_balance(flat, balance), chunks=exported["chunks"])
    partitions = list(pipe.partitions)
    if len(partitions) != len(stages):
        failures.append("%s: Pipe made %d partitions, the placement has %d stages" % (what, len(partitions), len(stages)))
        return
    by_name = {l["name"]: l for l in graph["layers"]}
    for k, (partition, (devices, names)) in enumerate(zip(partitions, stages)):
        got = [name_of.get(id(m), "?") for m in partition.children()]
        if got != names:
            failures.append("%s: partition %d holds %s, the placement's stage on %s holds %s" % (what, k, got, devices, names))
        types = [type(m) for m in partition.children()]
        want_types = [MODULE_TYPE[by_name[n]["op"]] for n in names]
        if types != want_types:
            failures.append("%s: partition %d has types %s, expected %s" % (what, k, types, want_types))
        params = sum(p.numel() for p in partition.parameters())
        tapp_bytes = doc["breakdown"]["stages"][k]["param_bytes"]
        if params * 4 != tapp_bytes:
            failures.append("%s: partition %d has %d parameters in torch, TAPP counts %d bytes" % (what, k, params, tapp_bytes))
        placed_on = devices if isinstance(devices, str) else devices[0]
        if exported["devices"][k] != placed_on:
            failures.append("%s: partition %d exported on %s, placed on %s" % (what, k, exported["devices"][k], placed_on))

    x = torch.randn([8] + graph["input_shape"])
    flat.eval()
    pipe.eval()
    with torch.no_grad():
        want = flat(x)
        got = pipe(x).local_value()
    if not torch.allclose(want, got, atol=1e-5):
        failures.append("%s: Pipe's forward differs from the unsplit model's" % what)
    pipe.train()
    pipe(x).local_value().sum().backward()
    for k, partition in enumerate(partitions):
        if any(p.grad is None for p in partition.parameters()):
            failures.append("%s: the backward did not reach partition %d" % (what, k))
    if len(failures) == failures_before:
        print("ok: %s: %d partitions hold the placement's stages %s" % (what, len(partitions), [len(n) for _, n in stages]))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    cli, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(1)
    import torch.distributed.rpc as rpc
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    rpc.init_rpc("worker", rank=0, world_size=1)
    failures = []
    try:
        # Planners that cut these models into three stages at batch 8.
        for model, planners in (("alexnet_cifar", ("dp", "params")), ("vgg5", ("uniform", "params"))):
            for planner in planners:
                check(cli, work, model, planner, failures)
    finally:
        rpc.shutdown()
    for f in failures:
        print("FAIL: " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
