#!/usr/bin/env python3
"""PyTorch's own eager training step of a torchvision model on one GPU: the
peer of `tapp-cli profile MODEL --device cuda:0`'s whole step (bench/bench_gpu.sh).

The same step the profiler times: forward, cross entropy, backward (no
optimizer update), synthetic data, float32, train mode; each step starts and
ends with torch.cuda.synchronize() as the profiler's do. Prints one JSON line
{"model", "batch", "params", "step_ms": median, "samples_ms"}.
"""
import argparse
import json
import statistics
import time

import torch
import torchvision


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=["alexnet", "vgg16", "resnet50"])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()
    torch.manual_seed(1)
    dev = torch.device("cuda:0")
    model = getattr(torchvision.models, a.model)(num_classes=1000).to(dev).train()
    x = torch.randn(a.batch, 3, a.size, a.size, device=dev)
    y = torch.randint(0, 1000, (a.batch,), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss()
    times = []
    for r in range(a.warmup + a.steps):
        for p in model.parameters():
            p.grad = None
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss_fn(model(x), y).backward()
        torch.cuda.synchronize()
        if r >= a.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({"model": a.model, "batch": a.batch, "params": sum(p.numel() for p in model.parameters()),
                      "step_ms": statistics.median(times), "samples_ms": [round(t, 3) for t in times]}))


if __name__ == "__main__":
    main()
