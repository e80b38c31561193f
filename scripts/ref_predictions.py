#!/usr/bin/python3
"""Two versions of a small classifier and their reference predictions, for
featurefs's predictions tests (no downloads, seeded weights).

    /usr/bin/python3 scripts/ref_predictions.py --out DIR IMAGE...

writes DIR/v1.onnx and DIR/v2.onnx: scripts/export_odd_models.py's Tiny
net (10 classes) with seeds 1 and 2, its last layer's weights scaled so that
the class scores spread out; and DIR/ref.json: {"v1": [...], "v2": [...]},
for each image in argument order the softmax of that model's logits (a list
of 10 floats), or null for an image PIL cannot read. Preprocessing is
torchvision's: PIL decode, convert("RGB"), Resize(256), CenterCrop(224),
ToTensor(), Normalize(ImageNet mean, std).
"""
import argparse
import json
import os
import sys

import torch
from PIL import Image
from torchvision import transforms

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_odd_models import Tiny, export  # noqa: E402


def build(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    m = Tiny()
    with torch.no_grad():
        m.fc.weight.mul_(40.0)
        m.fc.bias.mul_(4.0)
    return m.eval()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("images", nargs="*")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    tf = transforms.Compose([
        transforms.Resize(256),
        transforms.CenterCrop(224),
        transforms.ToTensor(),
        transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])
    ref = {}
    for name, seed in (("v1", 1), ("v2", 2)):
        model = build(seed)
        export(model, (torch.randn(1, 3, 224, 224),), os.path.join(args.out, name + ".onnx"), ["input"])
        probs = []
        with torch.no_grad():
            for path in args.images:
                try:
                    with Image.open(path) as im:
                        x = tf(im.convert("RGB")).unsqueeze(0)
                except Exception:  # noqa: BLE001 - a corrupt image is expected
                    probs.append(None)
                    continue
                probs.append(torch.softmax(model(x).double(), dim=1)[0].tolist())
        ref[name] = probs
    with open(os.path.join(args.out, "ref.json"), "w") as f:
        json.dump(ref, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
