#!/usr/bin/python3
"""Reference features from torchvision, for featurefs's fidelity test.

    /usr/bin/python3 scripts/ref_features.py --model resnet50 --seed 0 \
        --module layer3.3 --out DIR IMAGE...

Builds the model with scripts/export_model.py's build() (same name and seed
give the same weights as the exported ONNX file), and for each image i
(in argument order) writes DIR/<i>.input.npy (the transformed input,
3x224x224) and DIR/<i>.npy (the output of --module for that input, no batch
axis; with several --module, DIR/<i>.<module>.npy for each), after PIL
decoding, convert("RGB") and torchvision's Resize(256), CenterCrop(224),
ToTensor(), Normalize(ImageNet mean, std). Images PIL cannot
read are listed in DIR/errors.json instead.

With --views FILE, FILE holds one JSON object per line, an augmented view
(docs/AUGMENT.md): "image" (its path) and the view's "top", "left",
"height", "width", "flip" and "size"; output i is line i's view:
F.resized_crop(img, top, left, height, width, [size, size]) (PIL bilinear),
F.hflip when flip, then ToTensor() and Normalize(). No IMAGE arguments.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
from PIL import Image
from torchvision import transforms

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_model import build  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--module", action="append",
                    help="submodule whose output is the feature (default layer3.3); "
                         "given more than once, DIR/<i>.<module>.npy for each")
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--views", help="a JSON-lines file of augmented views to compute instead of IMAGE...")
    ap.add_argument("images", nargs="*")
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)

    modules = args.module or ["layer3.3"]
    model = build(args.model, args.seed)
    feats = {}
    for name in modules:
        model.get_submodule(name).register_forward_hook(
            lambda mod, inp, out, name=name: feats.__setitem__(name, out.detach()))
    tf = transforms.Compose([
        transforms.Resize(256),
        transforms.CenterCrop(224),
        transforms.ToTensor(),
        transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])
    norm = transforms.Compose([
        transforms.ToTensor(),
        transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])
    from torchvision.transforms import functional as F
    views = []
    if args.views:
        with open(args.views) as f:
            views = [json.loads(line) for line in f if line.strip()]
        args.images = [v["image"] for v in views]
    if not args.images:
        ap.error("no image: give IMAGE... or --views FILE")

    def transform(i, im):
        if not views:
            return tf(im)
        v = views[i]
        im = F.resized_crop(im, v["top"], v["left"], v["height"], v["width"], [v["size"], v["size"]],
                            interpolation=transforms.InterpolationMode.BILINEAR)
        if v["flip"]:
            im = F.hflip(im)
        return norm(im)

    errors = {}
    with torch.no_grad():
        for i, path in enumerate(args.images):
            try:
                with Image.open(path) as im:
                    x = transform(i, im.convert("RGB"))
            except Exception as e:  # noqa: BLE001 - any PIL failure is a bad image
                errors[str(i)] = f"{type(e).__name__}: {e}"
                continue
            model(x.unsqueeze(0))
            np.save(os.path.join(args.out, f"{i}.input.npy"), x.numpy().astype(np.float32))
            for name in modules:
                out = f"{i}.npy" if len(modules) == 1 else f"{i}.{name}.npy"
                np.save(os.path.join(args.out, out), feats[name][0].numpy().astype(np.float32))
    with open(os.path.join(args.out, "errors.json"), "w") as f:
        json.dump(errors, f)
    print(f"wrote {len(args.images) - len(errors)} reference features to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
