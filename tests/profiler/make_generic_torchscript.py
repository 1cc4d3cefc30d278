"""Saves torchvision models and a Transformer language model as TorchScript for the generic import test.

usage: make_generic_torchscript.py OUT_DIR [--vit-b-16]
Writes, each with its parameter count as PyTorch counts it in OUT_DIR/expected.json:
  resnet18_traced.pt      torchvision resnet18 (10 classes), torch.jit.trace at 3x32x32
  mobilenet_v2_scripted.pt torchvision mobilenet_v2 (10 classes, classifier dropout 0), torch.jit.script
  googlenet_scripted.pt / googlenet_aux_scripted.pt  torchvision googlenet (10 classes, dropout 0), without and
                          with its auxiliary heads, torch.jit.script: forward returns GoogLeNetOutputs, a tuple
                          (its expected count leaves the auxiliary heads out: the import drops them)
  vit_tiny_traced.pt      torchvision's VisionTransformer code at 32x32 (patch 8, 2 layers, width 32), traced
  lm_traced.pt / lm_scripted.pt  embedding + 4-layer nn.TransformerEncoder (batch_first) + linear head
                          over a 100-token vocabulary, sequences of 8 tokens (dropout 0)
  lm_tied_traced.pt       the same with the head's weight tied to the embedding's table (GPT-2's tying), traced
  conv1d_len20_traced.pt  a Conv1d over 20 steps and a linear head sized for them, traced: no input
                          size the import guesses runs it (the test passes 20)
  shared_linear_traced.pt / shared_linear_scripted.pt  one nn.Linear called twice (its weight shared by
                          two ops) before a head: counted once, trained as one parameter
  dict_out_traced.pt / dict_out_scripted.pt  forward returns a dict {"hidden": ..., "logits": ...} as
                          Hugging Face models do (traced with strict=False): imported as its logits
  view_28_traced.pt       a conv over 1x28x28 images whose head reshapes with view(-1, 4 * 24 * 24):
                          the ops import refuses the view, the per-layer one finds 28 among its guesses
  dense_sequence_traced.pt a Transformer encoder layer over sequences of 32-wide vectors (no embedding),
                          mean-pooled into a linear head, traced at 10 steps: its input is [steps, 32]
  gru_traced.pt / gru_scripted.pt  a bidirectional GRU over sequences of 8-wide vectors (batch first), its
                          outputs mean-pooled into a linear head: the first op is the recurrent one
  vit_b_16_traced.pt      (with --vit-b-16) torchvision vit_b_16 at 224x224, traced
Dropout is 0 where a model trains in a test, so pipelined and single-device training draw no random masks.
"""
import json
import os
import sys
from collections import OrderedDict
from typing import Dict, List

import torch
import torch.nn as nn
import torchvision


class TokenLM(nn.Module):
    def __init__(self, vocab=100, dim=32, heads=2, layers=4, tied=False):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(dim, vocab)
        if tied:
            self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)))


class Conv1dSeries(nn.Module):
    """4 channels over 20 steps; the head's input size fixes the length."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3)
        self.head = nn.Linear(8 * 18, 3)

    def forward(self, x):
        return self.head(torch.flatten(torch.relu(self.conv(x)), 1))


class SharedLinear(nn.Module):
    """The same layer applied twice, as a weight-tied recurrence unrolled."""

    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(16, 16)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(torch.relu(self.layer(torch.relu(self.layer(x)))))


class DictOut(nn.Module):
    """Returns its hidden state first and its logits second, by name."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(12, 16)
        self.head = nn.Linear(16, 5)

    def forward(self, x) -> Dict[str, torch.Tensor]:
        hidden = torch.relu(self.body(x))
        return {"hidden": hidden, "logits": self.head(hidden)}


class ViewHead(nn.Module):
    """MNIST-sized: the head's view(-1, n) fixes the side at 28."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 5)
        self.head = nn.Linear(4 * 24 * 24, 10)

    def forward(self, x):
        return self.head(torch.relu(self.conv(x)).view(-1, 4 * 24 * 24))


class DenseSequence(nn.Module):
    """Sequences of 32-wide feature vectors (audio frames, sensor readings): no embedding."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        return self.head(self.encoder(x).mean(1))


class GruSequence(nn.Module):
    """A recurrent layer reads the model input (no embedding, no linear before it)."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(8, 12, batch_first=True, bidirectional=True)
        self.head = nn.Linear(24, 3)

    def forward(self, x):
        out, _ = self.gru(x)
        return self.head(out.mean(1))


class UNetSegmentation(nn.Module):
    """A tiny U-Net: class scores per pixel ({4, H, W}), a transposed conv and a skip concat."""

    def __init__(self):
        super().__init__()
        self.down1 = nn.Conv2d(3, 8, 3, padding=1)
        self.down2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.classes = nn.Conv2d(16, 4, 1)

    def forward(self, x):
        a = torch.relu(self.down1(x))
        u = self.up(torch.relu(self.down2(a)))
        return self.classes(torch.cat([a, u], 1))


class UpsampledSegmentation(nn.Module):
    """Reads the input's size first and upsamples its class maps to it last (torchvision's segmentation heads)."""

    def __init__(self):
        super().__init__()
        self.down = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.mid = nn.Conv2d(8, 8, 3, padding=1)
        self.classes = nn.Conv2d(8, 3, 1)

    def forward(self, x):
        size = x.shape[-2:]
        y = self.classes(torch.relu(self.mid(torch.relu(self.down(x)))))
        return nn.functional.interpolate(y, size=size, mode="bilinear", align_corners=False)


class ListedBranches(nn.Module):
    """Parallel convolutions appended to a list built empty, then concatenated (torchvision's ASPP)."""

    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([nn.Sequential(nn.Conv2d(8, 4, k, padding=k // 2), nn.ReLU()) for k in (1, 3, 3)])
        self.project = nn.Conv2d(12, 8, 1)

    def forward(self, x):
        res: List[torch.Tensor] = []
        for conv in self.convs:
            res.append(conv(x))
        return self.project(torch.cat(res, dim=1))


class ListedBranchesClassifier(nn.Module):
    """A stem, the listed branches (most of the weights: their calls are cut apart), a linear head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.branches = ListedBranches()
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        return self.head(self.branches(torch.relu(self.stem(x))).mean(dim=(2, 3)))


class SegmentationDict(nn.Module):
    """Returns an OrderedDict it fills by assignment, its class maps upsampled to the input (torchvision's segmentation models)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.branches = ListedBranches()
        self.classes = nn.Conv2d(8, 3, 1)

    def forward(self, x):
        size = x.shape[-2:]
        y = self.classes(self.branches(torch.relu(self.stem(x))))
        result = OrderedDict()
        result["out"] = nn.functional.interpolate(y, size=size, mode="bilinear", align_corners=False)
        return result


def count(m):
    return sum(p.numel() for p in m.parameters())


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    expected = {}

    resnet = torchvision.models.resnet18(num_classes=10)
    torch.jit.trace(resnet, torch.randn(2, 3, 32, 32), check_trace=False).save(os.path.join(out, "resnet18_traced.pt"))
    expected["resnet18_traced"] = count(resnet)

    mobilenet = torchvision.models.mobilenet_v2(num_classes=10)
    mobilenet.classifier[0].p = 0.0
    torch.jit.script(mobilenet).save(os.path.join(out, "mobilenet_v2_scripted.pt"))
    expected["mobilenet_v2_scripted"] = count(mobilenet)

    for name, aux in (("googlenet_scripted", False), ("googlenet_aux_scripted", True)):
        googlenet = torchvision.models.googlenet(num_classes=10, aux_logits=aux, init_weights=False, dropout=0.0)
        torch.jit.script(googlenet).save(os.path.join(out, name + ".pt"))
        # What the import trains: the logits' path; the auxiliary heads only training mode runs are dropped.
        expected[name] = count(googlenet) - (count(googlenet.aux1) + count(googlenet.aux2) if aux else 0)

    vit = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                               hidden_dim=32, mlp_dim=64, dropout=0.0, num_classes=10)
    torch.jit.trace(vit, torch.randn(2, 3, 32, 32), check_trace=False).save(os.path.join(out, "vit_tiny_traced.pt"))
    expected["vit_tiny_traced"] = count(vit)

    lm = TokenLM()
    tokens = torch.randint(0, 100, (2, 8))
    torch.jit.trace(lm, tokens, check_trace=False).save(os.path.join(out, "lm_traced.pt"))
    torch.jit.script(lm).save(os.path.join(out, "lm_scripted.pt"))
    expected["lm_traced"] = expected["lm_scripted"] = count(lm)

    tied = TokenLM(tied=True)
    torch.jit.trace(tied, tokens, check_trace=False).save(os.path.join(out, "lm_tied_traced.pt"))
    expected["lm_tied_traced"] = count(tied)  # the shared table once

    series = Conv1dSeries()
    torch.jit.trace(series, torch.randn(2, 4, 20), check_trace=False).save(os.path.join(out, "conv1d_len20_traced.pt"))
    expected["conv1d_len20_traced"] = count(series)

    shared = SharedLinear()
    torch.jit.trace(shared, torch.randn(2, 16), check_trace=False).save(os.path.join(out, "shared_linear_traced.pt"))
    torch.jit.script(shared).save(os.path.join(out, "shared_linear_scripted.pt"))
    expected["shared_linear_traced"] = expected["shared_linear_scripted"] = count(shared)

    named = DictOut()
    torch.jit.trace(named, torch.randn(2, 12), strict=False, check_trace=False).save(
        os.path.join(out, "dict_out_traced.pt"))
    torch.jit.script(named).save(os.path.join(out, "dict_out_scripted.pt"))
    expected["dict_out_traced"] = expected["dict_out_scripted"] = count(named)

    mnist = ViewHead()
    torch.jit.trace(mnist, torch.randn(2, 1, 28, 28), check_trace=False).save(os.path.join(out, "view_28_traced.pt"))
    expected["view_28_traced"] = count(mnist)

    dense = DenseSequence()
    dense.eval()  # traced as it is imported and profiled; dropout 0 either way
    torch.jit.trace(dense, torch.randn(2, 10, 32), check_trace=False).save(os.path.join(out, "dense_sequence_traced.pt"))
    expected["dense_sequence_traced"] = count(dense)

    gru = GruSequence()
    gru.eval()
    torch.jit.trace(gru, torch.randn(2, 10, 8), check_trace=False).save(os.path.join(out, "gru_traced.pt"))
    torch.jit.script(gru).save(os.path.join(out, "gru_scripted.pt"))
    expected["gru_traced"] = expected["gru_scripted"] = count(gru)

    unet = UNetSegmentation()
    torch.jit.trace(unet, torch.randn(2, 3, 16, 16), check_trace=False).save(os.path.join(out, "unet_seg_traced.pt"))
    torch.jit.script(unet).save(os.path.join(out, "unet_seg_scripted.pt"))
    expected["unet_seg_traced"] = expected["unet_seg_scripted"] = count(unet)

    upsampled = UpsampledSegmentation()
    torch.jit.trace(upsampled, torch.randn(2, 3, 16, 16), check_trace=False).save(
        os.path.join(out, "upsampled_seg_traced.pt"))
    torch.jit.script(upsampled).save(os.path.join(out, "upsampled_seg_scripted.pt"))
    expected["upsampled_seg_traced"] = expected["upsampled_seg_scripted"] = count(upsampled)

    listed = ListedBranchesClassifier()
    torch.jit.script(listed).save(os.path.join(out, "listed_branches_scripted.pt"))
    expected["listed_branches_scripted"] = count(listed)

    segdict = SegmentationDict()
    torch.jit.script(segdict).save(os.path.join(out, "seg_dict_scripted.pt"))
    expected["seg_dict_scripted"] = count(segdict)

    if "--vit-b-16" in sys.argv:
        vit_b = torchvision.models.vit_b_16()
        vit_b.eval()
        torch.jit.trace(vit_b, torch.randn(1, 3, 224, 224), check_trace=False).save(os.path.join(out, "vit_b_16_traced.pt"))
        expected["vit_b_16_traced"] = count(vit_b)

    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f)


if __name__ == "__main__":
    main()
