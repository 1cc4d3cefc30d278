"""Saves small PyTorch models as TorchScript for the profiler's import test.

usage: make_torchscript.py OUT_DIR
Writes OUT_DIR/branchy_scripted.pt (torch.jit.script), OUT_DIR/branchy_traced.pt
(torch.jit.trace), OUT_DIR/mlp_traced.pt, OUT_DIR/classifier_{scripted,traced}.pt
(ReLU6 + log_softmax), OUT_DIR/exp_scripted.pt (an op the importer does not support),
OUT_DIR/scaled_traced.pt (a tensor constant in the code), OUT_DIR/constant_too_large.pt (the same
file with its constant's size raised from 4 to 40 over the storage of 4) and OUT_DIR/expected.json
with each model's parameter count as PyTorch counts it.
"""
import json
import os
import sys
import warnings
import zipfile

import torch
import torch.nn as nn


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(2))
        self.b1 = nn.Conv2d(8, 4, 1)
        self.b3 = nn.Conv2d(8, 4, 3, padding=1, bias=False)
        self.pool = nn.AdaptiveAvgPool2d((4, 4))
        self.drop = nn.Dropout(0.25)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = self.stem(x)
        y = torch.cat([self.b1(x), self.b3(x)], 1)
        y = torch.relu(y + x)
        y = torch.flatten(self.pool(y), 1)
        return self.fc(self.drop(y))


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 16)
        self.act = nn.Tanh()
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Classifier(nn.Module):
    """ReLU6 and a log-softmax head over a flat input (functional ops)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 16)
        self.act = nn.ReLU6()
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return torch.log_softmax(self.fc2(self.act(self.fc1(x))), -1)


class WithExp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(20, 3)

    def forward(self, x):
        return torch.exp(self.fc(x))


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x * torch.tensor([1.0, 2.0, 3.0, 4.0]))


def with_constant_size(src, dst, size):
    """Copies src with the size of the tensor in its constants.pkl set to `size` (LibTorch
    does not check the archive's CRCs, so the copy loads)."""
    with open(src, "rb") as f:
        raw = bytearray(f.read())
    with zipfile.ZipFile(src) as z:
        pkl = z.read(next(n for n in z.namelist() if n.endswith("/constants.pkl")))
    # _rebuild_tensor_v2(storage, offset, (4,), (1,), ...): the size tuple is "( K 4 t".
    size_at = raw.find(pkl) + pkl.index(b"(K\x04t")
    raw[size_at + 2] = size
    with open(dst, "wb") as f:
        f.write(raw)


def count(m):
    return sum(p.numel() for p in m.parameters())


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    branchy = Branchy()
    torch.jit.script(branchy).save(os.path.join(out, "branchy_scripted.pt"))
    torch.jit.trace(branchy, torch.randn(2, 3, 32, 32), check_trace=False).save(os.path.join(out, "branchy_traced.pt"))
    mlp = Mlp()
    torch.jit.trace(mlp, torch.randn(2, 20)).save(os.path.join(out, "mlp_traced.pt"))
    torch.jit.script(Classifier()).save(os.path.join(out, "classifier_scripted.pt"))
    torch.jit.trace(Classifier(), torch.randn(2, 20)).save(os.path.join(out, "classifier_traced.pt"))
    torch.jit.script(WithExp()).save(os.path.join(out, "exp_scripted.pt"))
    with warnings.catch_warnings():  # the constant is meant to be one
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        scaled = torch.jit.trace(Scaled(), torch.randn(2, 4))
    scaled.save(os.path.join(out, "scaled_traced.pt"))
    with_constant_size(os.path.join(out, "scaled_traced.pt"), os.path.join(out, "constant_too_large.pt"), 40)
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump({"branchy_params": count(branchy), "mlp_params": count(mlp)}, f)


if __name__ == "__main__":
    main()
