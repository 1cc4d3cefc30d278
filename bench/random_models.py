#!/usr/bin/env python3
"""Writes random layer graphs (model JSON as `tapp-cli export-model` writes it), one per seed.

usage: bench/random_models.py OUTDIR SEED [SEED ...]  ->  OUTDIR/model_rand<SEED>.json

Each model is one of:
  cnn:  a 3x16x16-3x128x128 input, 2-6 stages; a stage is a conv (+ batchnorm)
        + ReLU, then either nothing, a residual pair joined by an add, or 2-4
        towers (1x1, 3x3, 3x3-3x3, pool-1x1) joined by a concat; then a max-pool;
        the head an adaptive average pool or a flatten, 0-2 hidden linear layers
        and a classifier of 2-1000 classes. 4-256 channels.
  mlp:  a flat input of 16-4096, 1-8 linear + ReLU layers of width 16-8192,
        some pairs joined by a residual add, a classifier.
They are not the zoo's and not placer/training_set's generators: inputs no
method here was tuned on (bench/bench_random_clusters.sh, RANDOM_MODELS). The same seed always
gives the same model.
"""
import random

from random_clusters import write_per_seed  # bench/, the script's own folder


class Builder:
    def __init__(self, name, input_shape):
        self.layers = []
        self.model = {"name": name, "input_shape": input_shape, "layers": self.layers}

    def add(self, op, inputs, **attrs):
        name = f"l{len(self.layers)}.{op}"
        layer = {"name": name, "op": op, "inputs": inputs}
        if attrs:
            layer["attrs"] = attrs
        self.layers.append(layer)
        return name


def conv(b, inputs, out, kernel, bn=True):
    y = b.add("conv2d", inputs, out=out, kernel=kernel, stride=1, padding=kernel // 2, groups=1, bias=not bn)
    if bn:
        y = b.add("batchnorm2d", [y], eps=1e-5)
    return b.add("relu", [y])


def cnn(r, name):
    side = r.choice([16, 32, 64, 128])
    b = Builder(name, [3, side, side])
    width = r.choice([4, 8, 16, 32, 64])
    prev = []  # the stage's input: none for the first layer
    for stage in range(r.randint(2, min(6, side.bit_length() - 2))):
        width = min(256, width * r.choice([1, 2]))
        x = conv(b, prev, width, r.choice([1, 3, 5]), bn=r.random() < 0.5)
        kind = r.choice(["plain", "residual", "towers"])
        if kind == "residual":
            y = conv(b, [x], width, 3)
            y = b.add("conv2d", [y], out=width, kernel=3, stride=1, padding=1, groups=1, bias=True)
            x = b.add("relu", [b.add("add", [x, y])])
        elif kind == "towers":
            towers = []
            for t in r.sample(["1x1", "3x3", "3x3x2", "pool"], r.randint(2, 4)):
                out = max(1, width // 2)
                if t == "1x1":
                    towers.append(conv(b, [x], out, 1))
                elif t == "3x3":
                    towers.append(conv(b, [conv(b, [x], out, 1)], out, 3))
                elif t == "3x3x2":
                    towers.append(conv(b, [conv(b, [conv(b, [x], out, 1)], out, 3)], out, 3))
                else:
                    p = b.add("maxpool2d", [x], kernel=3, stride=1, padding=1, ceil_mode=False)
                    towers.append(conv(b, [p], out, 1))
            x = b.add("concat", towers)
        x = b.add("maxpool2d", [x], kernel=2, stride=2, padding=0, ceil_mode=False)
        prev = [x]
    if r.random() < 0.5:
        x = b.add("adaptive_avgpool2d", [x], output_size=1)
    x = b.add("flatten", [x])
    for _ in range(r.randint(0, 2)):
        x = b.add("relu", [b.add("linear", [x], out=r.choice([64, 256, 1024, 4096]), bias=True)])
    b.add("linear", [x], out=r.choice([2, 10, 100, 1000]), bias=True)
    return b.model


def mlp(r, name):
    b = Builder(name, [r.choice([16, 64, 256, 1024, 4096])])
    x, prev = None, []
    for i in range(r.randint(1, 8)):
        width = r.choice([16, 64, 256, 1024, 4096, 8192])
        y = b.add("relu", [b.add("linear", prev, out=width, bias=True)])
        if x is not None and r.random() < 0.3:
            z = b.add("linear", [y], out=width, bias=True)
            y = b.add("relu", [b.add("add", [y, z])])
        x, prev = y, [y]
    b.add("linear", prev, out=r.choice([2, 10, 1000]), bias=True)
    return b.model


def model(seed):
    r = random.Random(seed * 104729 + 7)
    name = f"random model {seed}"
    return cnn(r, name) if r.random() < 0.75 else mlp(r, name)


def main():
    for path in write_per_seed(__doc__, "model_rand", model):
        print(path)


if __name__ == "__main__":
    main()
