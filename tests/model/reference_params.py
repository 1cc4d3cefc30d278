"""Parameter counts of PyTorch reference modules for the zoo's transformers.

Usage: reference_params.py MODEL:VOCABULARY:POSITIONS:LAYERS:WIDTH:HEADS:IMAGE:CLASSES ...
Prints one count per argument. GPT-2 and BERT are assembled from torch.nn parts
(the transformers library is not installed); ViT is torchvision's own
VisionTransformer. Large modules are built on the meta device: no memory, no init.
"""
import sys

import torch
from torch import nn
import torchvision


def blocks(layers, width, heads, norm_first, eps, device):
    return nn.ModuleList(
        nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, activation="gelu", layer_norm_eps=eps,
                                   batch_first=True, norm_first=norm_first, device=device)
        for _ in range(layers))


class GPT2(nn.Module):
    def __init__(self, vocabulary, positions, layers, width, heads, device):
        super().__init__()
        self.wte = nn.Embedding(vocabulary, width, device=device)
        self.wpe = nn.Embedding(positions, width, device=device)
        self.h = blocks(layers, width, heads, True, 1e-5, device)
        self.ln_f = nn.LayerNorm(width, device=device)
        self.lm_head = nn.Linear(width, vocabulary, bias=False, device=device)
        self.lm_head.weight = self.wte.weight  # tied: one parameter


class Bert(nn.Module):
    def __init__(self, vocabulary, positions, layers, width, heads, classes, device):
        super().__init__()
        self.word = nn.Embedding(vocabulary, width, device=device)
        self.position = nn.Embedding(positions, width, device=device)
        self.token_type = nn.Embedding(2, width, device=device)
        self.norm = nn.LayerNorm(width, eps=1e-12, device=device)
        self.layer = blocks(layers, width, heads, False, 1e-12, device)
        self.pooler = nn.Linear(width, width, device=device)
        self.classifier = nn.Linear(width, classes, device=device) if classes else None


def build(spec):
    model, vocabulary, positions, layers, width, heads, image, classes = spec.split(":")
    vocabulary, positions, layers, width, heads, image, classes = map(
        int, (vocabulary, positions, layers, width, heads, image, classes))
    meta = torch.device("meta")
    if model.startswith("gpt2"):
        return GPT2(vocabulary, positions, layers, width, heads, meta)
    if model == "bert_base":
        return Bert(vocabulary, positions, layers, width, heads, classes, meta)
    if model == "vit_b_16":
        return torchvision.models.VisionTransformer(image_size=image, patch_size=16, num_layers=layers,
                                                    num_heads=heads, hidden_dim=width, mlp_dim=4 * width,
                                                    num_classes=classes)
    if model == "text_lstm":  # an embedding, `layers` one-layer LSTMs, a classifier on the last token
        return nn.ModuleList([nn.Embedding(vocabulary, width, device=meta)] +
                             [nn.LSTM(width, width, batch_first=True, device=meta) for _ in range(layers)] +
                             [nn.Linear(width, classes, device=meta)])
    if model == "text_transformer":  # embeddings, pre-norm encoder blocks, a final norm and a classifier
        return nn.ModuleList([nn.Embedding(vocabulary, width, device=meta), nn.Embedding(positions, width, device=meta),
                              blocks(layers, width, heads, True, 1e-5, meta), nn.LayerNorm(width, device=meta),
                              nn.Linear(width, classes, device=meta)])
    raise SystemExit("unknown model " + model)


for spec in sys.argv[1:]:
    print(sum(p.numel() for p in build(spec).parameters()))
