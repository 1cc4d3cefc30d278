#!/usr/bin/env python3
"""PyTorch's own pipeline (torch.distributed.pipeline.sync.Pipe) on the same
model, split and chunks as bench/bench_runtime.sh gives TAPP's runtime.

alexnet_cifar as in profiler/zoo.cpp (3x3 convs 64-192-384-256-256, three 2x2
pools, 1024-wide classifier with dropout), synthetic CIFAR-size data, SGD with
momentum 0.9, cross entropy. Pipe needs torch.distributed.rpc initialised
(one process, world size 1); both partitions are on the CPU.
Prints one JSON line: {"step_ms": median, "samples_ms": [...], ...}.
"""
import argparse
import json
import os
import statistics
import tempfile
import time


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--split", type=int, default=8, help="index of the first layer of stage 2 (8: conv4)")
    ap.add_argument("--threads", type=int, default=1,
                    help="threads of the Pipe process: torch.set_num_threads and OpenBLAS's pool")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--plain", action="store_true",
                    help="the same model and step in one process without Pipe (the single-process peer)")
    return ap.parse_args()


ARGS = parse_args()
# OpenBLAS sizes its own pool (default: every core) when torch loads it, and
# torch.set_num_threads does not resize it: fix it before the import.
os.environ["OPENBLAS_NUM_THREADS"] = str(ARGS.threads)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.distributed import rpc  # noqa: E402
from torch.distributed.pipeline.sync import Pipe  # noqa: E402


def alexnet_cifar_layers(classes=10):
    return [
        nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Conv2d(64, 192, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(),
        # ---- default split (--split 8): examples/placement_alexnet_cifar_2stage.json puts conv4.. on cpu1
        nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Flatten(), nn.Dropout(0.5), nn.Linear(256 * 4 * 4, 1024), nn.ReLU(),
        nn.Dropout(0.5), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, classes),
    ]


def main():
    args = ARGS

    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    with tempfile.NamedTemporaryFile() as f:
        rpc.init_rpc("pipe", rank=0, world_size=1,
                     rpc_backend_options=rpc.TensorPipeRpcBackendOptions(init_method="file://" + f.name))
        layers = alexnet_cifar_layers()
        model = nn.Sequential(nn.Sequential(*layers[:args.split]), nn.Sequential(*layers[args.split:]))
        pipe = model if args.plain else Pipe(model, chunks=args.chunks, checkpoint="never")
        opt = torch.optim.SGD(pipe.parameters(), lr=0.01, momentum=0.9)
        loss_fn = nn.CrossEntropyLoss()
        samples = []
        for step in range(args.warmup + args.steps):
            g = torch.Generator().manual_seed(1 + step)
            x = torch.randn(args.batch, 3, 32, 32, generator=g)
            y = torch.randint(10, (args.batch,), generator=g)
            t0 = time.perf_counter()
            out = pipe(x) if args.plain else pipe(x).local_value()
            loss = loss_fn(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            ms = (time.perf_counter() - t0) * 1e3
            if step >= args.warmup:
                samples.append(ms)
        rpc.shutdown()
    print(json.dumps({"runner": "torch.nn.Sequential" if args.plain else "torch.distributed.pipeline.sync.Pipe", "torch": torch.__version__,
                      "threads": args.threads, "chunks": args.chunks, "batch": args.batch,
                      "step_ms": statistics.median(samples), "samples_ms": samples}))


if __name__ == "__main__":
    main()
