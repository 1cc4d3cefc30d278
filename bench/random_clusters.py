#!/usr/bin/env python3
"""Writes random heterogeneous clusters, one per seed.

usage: bench/random_clusters.py [--lan] OUTDIR SEED [SEED ...]
  ->  OUTDIR/cluster_rand<SEED>.json (or cluster_lan<SEED>.json), each path printed

Each cluster: 2-6 one-thread CPU devices of 1-16 GB and speed 0.1-1.0; each
ordered pair of devices gets its own link with probability 0.7 (10 Mbit/s to
3.2 Gbit/s, 0.1-5 ms, so A->B and B->A differ), the rest the default link
(32 Mbit/s to 1 Gbit/s). --lan: 2-8 devices of 4-16 GB and speed 0.1-1.0 on
one fast network (every link 2.5-40 Gbit/s, 0.02-0.2 ms): machines of
different generations in one room, where replicas pay and PipeDream's equal
replicas do not fit (issue 15, item 6). The same seed always gives the same
cluster. These are inputs the project's methods were not tuned on
(bench_random_clusters.sh).
"""
import json
import os
import random
import sys


def cluster(seed):
    r = random.Random(seed * 7919 + 13)
    n = r.randint(2, 6)
    devices = [{"name": f"d{i}", "kind": "cpu", "threads": 1,
                "memory_mb": r.choice([1024, 2048, 4096, 8192, 16384]),
                "speed": round(r.uniform(0.1, 1.0), 3)} for i in range(n)]
    links = []
    for a in range(n):
        for b in range(n):
            if a != b and r.random() < 0.7:
                links.append({"from": f"d{a}", "to": f"d{b}", "bandwidth_mbps": round(10 ** r.uniform(1, 3.5)),
                              "latency_ms": round(r.uniform(0.1, 5), 2)})
    return {"name": f"random {seed}", "devices": devices, "links": links,
            "default_link": {"bandwidth_mbps": round(10 ** r.uniform(1.5, 3)), "latency_ms": 1}}


def lan_cluster(seed):
    r = random.Random(seed * 6997 + 29)
    n = r.randint(2, 8)
    devices = [{"name": f"d{i}", "kind": "cpu", "threads": 1, "memory_mb": r.choice([4096, 8192, 16384]),
                "speed": round(r.uniform(0.1, 1.0), 3)} for i in range(n)]
    return {"name": f"random LAN {seed}", "devices": devices,
            "default_link": {"bandwidth_mbps": round(10 ** r.uniform(3.4, 4.6)),
                             "latency_ms": round(r.uniform(0.02, 0.2), 3)}}


def write_per_seed(doc, prefix, make):
    """argv OUTDIR SEED...: writes make(seed) to OUTDIR/<prefix><SEED>.json; returns the paths."""
    if len(sys.argv) < 3:
        sys.exit(doc)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    paths = []
    for seed in sys.argv[2:]:
        paths.append(os.path.join(out, f"{prefix}{int(seed)}.json"))
        with open(paths[-1], "w") as f:
            json.dump(make(int(seed)), f, indent=1)
    return paths


def main():
    lan = sys.argv[1:2] == ["--lan"]
    if lan:
        del sys.argv[1]
    for path in write_per_seed(__doc__, *(("cluster_lan", lan_cluster) if lan else ("cluster_rand", cluster))):
        print(path)


if __name__ == "__main__":
    main()
