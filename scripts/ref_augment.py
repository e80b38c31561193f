#!/usr/bin/python3
"""Reference for featurefs's augmented views (extractor/augment), run with /usr/bin/python3.

  ref_augment.py params < CASES > RESULTS
      CASES: JSON lines {"identity": HEX, "view": K, "seed": S, "w": W, "h": H,
      "scale": [a, b], "ratio": [a, b]}. For each, runs torchvision 0.14's own
      RandomResizedCrop.get_params and RandomHorizontalFlip.forward with `torch`
      in torchvision.transforms.transforms replaced by a shim whose
      torch.empty(1).uniform_(a, b), torch.randint(lo, hi, size=(1,)) and
      torch.rand(1) take their numbers from the generator documented in
      extractor/augment/doc.go (reimplemented here from that text); everything
      else (torch.tensor, torch.log, torch.exp, hflip) is real torch. Writes
      JSON lines {"top", "left", "height", "width", "flip", "draws",
      "exp_calls", "exp_ulp_diffs"}: exp_ulp_diffs counts the torch.exp
      results that differ from the correctly rounded float32 exp.
  ref_augment.py views JOBS OUT
      JOBS: JSON {"mean": [3], "std": [3], "items": [{"path": P, "name": N,
      "params": {top, left, height, width, flip, size}}]}. For each item writes
      OUT/N.npy (float32 CHW) and OUT/N.u8.npy (uint8 HWC before ToTensor):
      F.resized_crop(Image.open(P).convert("RGB"), top, left, height, width,
      [size, size]) (PIL bilinear, antialiased), F.hflip if flip, then
      to_tensor and normalize(mean, std).
  ref_augment.py feature < CASES > RESULTS
      CASES: JSON lines {"identity": HEX, "view": K, "seed": S, "ops": [...],
      "x": [floats]}. For each, draws the feature-space view's numbers from
      the generator (stream of identity + b"\x00feature") and applies the ops
      as extractor/augment/feature.go's comment defines them, in numpy
      float32; writes {"brightness", "contrast", "bits", "y": [floats]}.
  ref_augment.py gen DIR
      Writes the test images (JPEG 4:2:0, 4:4:4, grayscale, PNG RGB/gray/
      paletted/RGBA; 37x53 to 640x480 and elongated ones).
"""
import hashlib
import json
import os
import struct
import sys

import numpy as np

DOMAIN = b"featurefs-augment-v1"


class Stream:
    """The documented counter-based generator."""

    def __init__(self, ident, view, seed):
        self.prefix = DOMAIN + struct.pack("<Q", len(ident)) + ident + struct.pack("<qQ", view, seed)
        self.n = 0

    def word(self):
        d = hashlib.sha256(self.prefix + struct.pack("<Q", self.n)).digest()
        self.n += 1
        return int.from_bytes(d[:8], "little")

    def u24(self):
        return (self.word() >> 40) * 2.0**-24


def make_shim(torch, stream, counters):
    class Empty:
        def uniform_(self, a, b):
            fa = torch.tensor(float(a), dtype=torch.float32)
            fb = torch.tensor(float(b), dtype=torch.float32)
            u = torch.tensor(stream.u24(), dtype=torch.float32)
            return (u * (fb - fa) + fa).reshape(1)

    class Shim:
        def __getattr__(self, name):
            return getattr(torch, name)

        def empty(self, *size, **kw):
            assert size == (1,) and not kw, size
            return Empty()

        def randint(self, low, high, size):
            assert tuple(size) == (1,) and high > low
            return torch.tensor([low + stream.word() % (high - low)], dtype=torch.int64)

        def rand(self, *size):
            assert size == (1,), size
            return torch.tensor([stream.u24()], dtype=torch.float32)

        def exp(self, x):
            r = torch.exp(x)
            counters["exp_calls"] += 1
            cr = np.float32(np.exp(np.float64(x.reshape(-1)[0].item())))
            if np.float32(r.reshape(-1)[0].item()) != cr:
                counters["exp_ulp_diffs"] += 1
            return r

    return Shim()


def cmd_params():
    import torch
    import torchvision.transforms.transforms as T

    real = T.torch
    out = []
    try:
        for line in sys.stdin:
            c = json.loads(line)
            stream = Stream(bytes.fromhex(c["identity"]), c["view"], c["seed"])
            counters = {"exp_calls": 0, "exp_ulp_diffs": 0}
            T.torch = make_shim(real, stream, counters)
            img = real.empty((1, c["h"], c["w"]), dtype=real.uint8)
            i, j, h, w = T.RandomResizedCrop.get_params(img, list(c["scale"]), list(c["ratio"]))
            probe = real.tensor([[[0, 1]]], dtype=real.uint8)
            flipped = T.RandomHorizontalFlip(0.5).forward(probe)
            flip = flipped.reshape(-1).tolist() == [1, 0]
            out.append(dict(top=int(i), left=int(j), height=int(h), width=int(w), flip=flip,
                            draws=stream.n, **counters))
    finally:
        T.torch = real
    for o in out:
        print(json.dumps(o))


def cmd_views(jobs, out):
    from PIL import Image
    import torchvision.transforms.functional as F

    with open(jobs) as f:
        job = json.load(f)
    for it in job["items"]:
        p = it["params"]
        img = Image.open(it["path"]).convert("RGB")
        v = F.resized_crop(img, p["top"], p["left"], p["height"], p["width"], [p["size"], p["size"]])
        if p["flip"]:
            v = F.hflip(v)
        np.save(os.path.join(out, it["name"] + ".u8.npy"), np.asarray(v, dtype=np.uint8))
        t = F.normalize(F.to_tensor(v), job["mean"], job["std"])
        np.save(os.path.join(out, it["name"] + ".npy"), t.numpy().astype(np.float32))


def cmd_gen(d):
    from PIL import Image

    rng = np.random.RandomState(41)

    def photo(w, h):
        # Smooth gradients plus noise and edges: what resampling must get right.
        y, x = np.mgrid[0:h, 0:w].astype(np.float64)
        r = 127 + 120 * np.sin(x / (3 + w / 17.0)) * np.cos(y / (5 + h / 23.0))
        g = 255 * (x + y) / max(1, w + h - 2)
        b = ((x // 7 + y // 5) % 2) * 200 + 20
        a = np.stack([r, g, b], axis=-1) + rng.normal(0, 12, (h, w, 3))
        return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "RGB")

    os.makedirs(d, exist_ok=True)
    sizes = [(37, 53), (53, 37), (64, 64), (100, 75), (224, 224), (250, 333), (301, 199),
             (640, 480), (480, 640), (500, 375), (1000, 40), (29, 700)]
    for n, (w, h) in enumerate(sizes):
        im = photo(w, h)
        kind = n % 4
        if kind == 0:
            im.save(os.path.join(d, f"rgb420_{w}x{h}.jpg"), quality=90, subsampling=2)
        elif kind == 1:
            im.save(os.path.join(d, f"rgb444_{w}x{h}.jpg"), quality=95, subsampling=0)
        elif kind == 2:
            im.convert("L").save(os.path.join(d, f"gray_{w}x{h}.jpg"), quality=88)
        else:
            im.save(os.path.join(d, f"rgb_{w}x{h}.png"))
    im = photo(211, 157)
    im.save(os.path.join(d, "prog420_211x157.jpg"), quality=85, progressive=True)
    im.save(os.path.join(d, "rgb444_211x157.jpg"), quality=85, subsampling=0)
    im.convert("L").save(os.path.join(d, "gray_211x157.png"))
    im.convert("P", palette=Image.ADAPTIVE, colors=64).save(os.path.join(d, "pal_211x157.png"))
    rgba = im.convert("RGBA")
    rgba.putalpha(Image.fromarray((rng.rand(157, 211) * 255).astype(np.uint8)))
    rgba.save(os.path.join(d, "rgba_211x157.png"))
    photo(640, 480).save(os.path.join(d, "rgb420_640x480.jpg"), quality=75, subsampling=2)
    photo(2000, 10).save(os.path.join(d, "rgb_2000x10.png"))
    photo(12, 900).save(os.path.join(d, "rgb420_12x900.jpg"), quality=90)


def cmd_feature():
    f32 = np.float32
    for line in sys.stdin:
        c = json.loads(line)
        st = Stream(bytes.fromhex(c["identity"]) + b"\x00feature", c["view"], c["seed"])

        def uniform(a, b):
            fa, fb = f32(a), f32(b)
            return f32(f32(f32(st.u24()) * f32(fb - fa)) + fa)

        b = cc = bits = 0
        for op in c["ops"]:
            if op == "brightness":
                b = uniform(-0.2, 0.2)
            elif op == "contrast":
                cc = uniform(0.8, 1.2)
            elif op == "posterize":
                bits = 3 + st.word() % 5
        x = np.array(c["x"], dtype=f32)
        lo, hi = x.min(), x.max()
        y = x
        if hi > lo:
            span = f32(hi - lo)
            u = ((x - lo) / span).astype(f32)
            for op in c["ops"]:
                if op == "brightness":
                    u = np.clip(u + b, 0, 1).astype(f32)
                elif op == "contrast":
                    m = f32(np.sum(u, dtype=np.float64) / len(u))
                    u = np.clip((u - m) * cc + m, 0, 1).astype(f32)
                elif op == "posterize":
                    lv = f32(1 << bits)
                    u = np.clip(np.floor(u * lv) / lv, 0, 1).astype(f32)
            y = (u * span + lo).astype(f32)
        print(json.dumps({"brightness": float(b), "contrast": float(cc), "bits": int(bits), "y": [float(v) for v in y]}))


def main():
    a = sys.argv[1:]
    if a[:1] == ["params"]:
        cmd_params()
    elif a[:1] == ["feature"]:
        cmd_feature()
    elif a[:1] == ["views"] and len(a) == 3:
        cmd_views(a[1], a[2])
    elif a[:1] == ["gen"] and len(a) == 2:
        cmd_gen(a[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
