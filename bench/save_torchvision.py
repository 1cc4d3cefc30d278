"""Saves torchvision 0.14 classification models as TorchScript files, random weights, for the benches.

usage: /usr/bin/python3 bench/save_torchvision.py OUT_DIR [--trace] MODEL...

Each MODEL (a torchvision.models name) is saved as OUT_DIR/MODEL.pt by torch.jit.script (the
default) or, with --trace, torch.jit.trace in eval mode at 224x224 (299 for inception_v3).
googlenet and inception_v3 are built without auxiliary heads and without their weight init
(scripted, they return GoogLeNetOutputs / InceptionOutputs: tapp imports the logits).
Prints each file written; a model that fails prints its error and the script exits 1 at the end.
"""
import os
import sys

import torch
import torchvision


def without_aux_heads(name):
    """The constructor arguments that leave out a model's auxiliary heads (none for most models)."""
    return {"aux_logits": False, "init_weights": False} if name in ("googlenet", "inception_v3") else {}


def build(name):
    model = torchvision.models.get_model(name, weights=None, **without_aux_heads(name))
    model.eval()
    return model


def main():
    args = [a for a in sys.argv[1:] if a != "--trace"]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    out, names = args[0], args[1:]
    trace = "--trace" in sys.argv
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    failed = 0
    for name in names:
        path = os.path.join(out, name + ".pt")
        try:
            model = build(name)
            if trace:
                side = 299 if name == "inception_v3" else 224
                saved = torch.jit.trace(model, torch.randn(1, 3, side, side), check_trace=False)
            else:
                saved = torch.jit.script(model)
            saved.save(path)
            print(path)
        except Exception as e:  # report and go on: one model's failure is a row, not the end
            failed += 1
            print(f"{name}: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
