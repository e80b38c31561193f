#!/usr/bin/python3
"""Generate a deterministic ImageFolder-style image tree for featurefs's
demo, tests and benchmarks.

    /usr/bin/python3 scripts/gen_dataset.py --out DIR [--classes 3]
        [--train 4] [--val 2] [--bad] [--seed 0] [--min-side 48 --max-side 480]

Writes DIR/{train,val}/<class>/<name>.{jpg,png}: JPEGs (baseline, progressive,
grayscale) and PNGs (RGB, RGBA, paletted, grayscale) of varied sizes and
aspect ratios, each with seeded noise and shapes so every image differs. With
--bad it also writes objects a reader must reject or never see:

    broken/truncated.jpg   a JPEG cut in half
    broken/empty.jpg       zero bytes
    broken/random.png      random bytes with a .png name
    broken/fakejpeg.jpg    a PNG header followed by garbage, named .jpg
    train/<class0>/README.txt and notes.json   non-image objects (never listed)

and, in train/<class0>, dup.jpg and dup.png: two images whose names differ
only by extension (listed as dup.jpg.npy and dup.png.npy).

DIR/manifest.json (not an image, so never listed) describes every file:
{"objects": [{"key", "kind": "image"|"bad"|"other", "split", "class",
"format", "mode", "width", "height", "bytes"}], "classes": [...]}
Only the standard library, numpy and PIL are used.
"""
import argparse
import io
import json
import os
import sys

import numpy as np
from PIL import Image, ImageDraw

CLASS_NAMES = ["cat", "dog", "fox", "owl", "yak", "elk", "emu", "gnu", "ram", "cod"]

# (extension, PIL format, mode, save kwargs) cycled through per image.
VARIANTS = [
    ("jpg", "JPEG", "RGB", {"quality": 90}),
    ("png", "PNG", "RGB", {}),
    ("jpg", "JPEG", "RGB", {"quality": 75, "progressive": True}),
    ("jpeg", "JPEG", "L", {"quality": 85}),
    ("png", "PNG", "RGBA", {}),
    ("png", "PNG", "P", {}),
    ("jpg", "JPEG", "RGB", {"quality": 95, "subsampling": 0}),
    ("png", "PNG", "L", {}),
]


def class_name(i: int) -> str:
    if i < len(CLASS_NAMES):
        return CLASS_NAMES[i]
    return f"class{i:03d}"


def make_image(rng: np.random.Generator, w: int, h: int, mode: str) -> Image.Image:
    """An RGB gradient with noise and a few random shapes, converted to mode."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.stack([
        xx / max(w - 1, 1) * rng.uniform(80, 255),
        yy / max(h - 1, 1) * rng.uniform(80, 255),
        (xx + yy) / max(w + h - 2, 1) * rng.uniform(80, 255),
    ], axis=-1)
    base += rng.normal(0, 20, size=base.shape)
    img = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8), "RGB")
    d = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(2, 7))):
        x0, x1 = sorted(rng.integers(0, w, size=2).tolist())
        y0, y1 = sorted(rng.integers(0, h, size=2).tolist())
        color = tuple(int(c) for c in rng.integers(0, 256, size=3))
        if rng.random() < 0.5:
            d.rectangle([x0, y0, x1, y1], fill=color)
        else:
            d.ellipse([x0, y0, x1, y1], fill=color)
    if mode == "RGB":
        return img
    if mode == "RGBA":
        alpha = Image.fromarray(rng.integers(64, 256, size=(h, w), dtype=np.uint8), "L")
        img = img.copy()
        img.putalpha(alpha)
        return img
    if mode == "P":
        return img.convert("P", palette=Image.ADAPTIVE, colors=64)
    return img.convert(mode)


def encode(img: Image.Image, fmt: str, kw: dict) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


def write(root: str, key: str, data: bytes) -> None:
    path = os.path.join(root, *key.split("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory to write (created)")
    ap.add_argument("--classes", type=int, default=3)
    ap.add_argument("--train", type=int, default=4, help="images per class in train/")
    ap.add_argument("--val", type=int, default=2, help="images per class in val/")
    ap.add_argument("--bad", action="store_true", help="add bad and non-image objects")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-side", type=int, default=48)
    ap.add_argument("--max-side", type=int, default=480)
    ap.add_argument("--formats", default="all", choices=["all", "jpg", "png"],
                    help="restrict to one format (benchmarks use jpg)")
    args = ap.parse_args()
    if args.classes < 1 or args.min_side < 1 or args.max_side < args.min_side:
        ap.error("need --classes >= 1 and 1 <= --min-side <= --max-side")

    rng = np.random.default_rng(args.seed)
    want = {"all": ("JPEG", "PNG"), "jpg": ("JPEG",), "png": ("PNG",)}[args.formats]
    variants = [v for v in VARIANTS if v[1] in want]
    objects = []
    classes = [class_name(i) for i in range(args.classes)]
    n = 0
    for split, per_class in (("train", args.train), ("val", args.val)):
        for c in classes:
            for j in range(per_class):
                ext, fmt, mode, kw = variants[n % len(variants)]
                n += 1
                w = int(rng.integers(args.min_side, args.max_side + 1))
                h = int(rng.integers(args.min_side, args.max_side + 1))
                data = encode(make_image(rng, w, h, mode), fmt, kw)
                key = f"{split}/{c}/img{j:04d}.{ext}"
                write(args.out, key, data)
                objects.append({"key": key, "kind": "image", "split": split, "class": c,
                                "format": fmt, "mode": mode, "width": w, "height": h,
                                "bytes": len(data)})

    if args.bad:
        c0 = classes[0]
        for ext, fmt in (("jpg", "JPEG"), ("png", "PNG")):
            w, h = int(rng.integers(64, 200)), int(rng.integers(64, 200))
            data = encode(make_image(rng, w, h, "RGB"), fmt, {})
            key = f"train/{c0}/dup.{ext}"
            write(args.out, key, data)
            objects.append({"key": key, "kind": "image", "split": "train", "class": c0,
                            "format": fmt, "mode": "RGB", "width": w, "height": h,
                            "bytes": len(data)})
        good = encode(make_image(rng, 160, 120, "RGB"), "JPEG", {"quality": 90})
        pngish = encode(make_image(rng, 32, 32, "RGB"), "PNG", {})
        bad = {
            "broken/truncated.jpg": good[: len(good) // 2],
            "broken/empty.jpg": b"",
            "broken/random.png": rng.integers(0, 256, size=4096, dtype=np.uint8).tobytes(),
            "broken/fakejpeg.jpg": pngish[:64] + rng.integers(0, 256, size=512, dtype=np.uint8).tobytes(),
        }
        for key, data in bad.items():
            write(args.out, key, data)
            objects.append({"key": key, "kind": "bad", "bytes": len(data)})
        other = {
            f"train/{c0}/README.txt": b"not an image\n",
            f"train/{c0}/notes.json": b"{}\n",
        }
        for key, data in other.items():
            write(args.out, key, data)
            objects.append({"key": key, "kind": "other", "bytes": len(data)})

    objects.sort(key=lambda o: o["key"])
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump({"classes": classes, "objects": objects}, f, indent=1)
    print(f"gen_dataset: {sum(o['kind'] == 'image' for o in objects)} images, "
          f"{len(objects)} objects in {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
