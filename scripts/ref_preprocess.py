#!/usr/bin/python3
"""Reference preprocessing for featurefs's extractor tests (run with /usr/bin/python3).

  ref_preprocess.py ref [--resize 256 --crop 224 --mean M M M --std S S S] --out DIR IMG...
      For each IMG writes DIR/<name>.npy: torchvision's
      Compose([Resize(resize), CenterCrop(crop), ToTensor(), Normalize(mean, std)])
      applied to Image.open(IMG).convert("RGB") (torchvision's default loader),
      float32 CHW; and DIR/<name>.u8.npy: the uint8 HWC image after CenterCrop.
  ref_preprocess.py gen DIR
      Writes a varied set of test images made with PIL (PNG modes, JPEG
      subsamplings, progressive, grayscale, CMYK, odd sizes).
  ref_preprocess.py genjpeg DIR
      Writes varied JPEGs made with PIL (subsamplings, progressive, optimized,
      grayscale, CMYK, CMYK marked YCCK, odd sizes, EXIF orientation, ICC,
      quality 10 and 100) for the decoder's bit-exactness test.
  ref_preprocess.py decode OUT IMG...
      For each IMG writes OUT/<name>.rgb, the raw bytes of
      np.asarray(Image.open(IMG).convert("RGB")), and OUT/<name>.size
      ("W H"); or OUT/<name>.err with the message when PIL raises.
  ref_preprocess.py resize JOBS OUT
      JOBS has lines "IMG W H"; for line i writes OUT/<i>.rgb, the raw bytes
      of Image.open(IMG).convert("RGB").resize((W, H), Image.BILINEAR).
  ref_preprocess.py fastref [--resize 256 --crop 224 --mean M M M --std S S S]
                           [--denoms 8,4,2] --out DIR IMG...
      featurefs's --fast-decode path done with PIL: a JPEG whose shorter
      side is at least D*resize (D the largest of --denoms that fits) is
      opened with Image.draft("RGB", (w//D, h//D)) (libjpeg's DCT scaling
      at 1/D), converted to RGB and resized with resize((W, H), BILINEAR,
      box=draft's box) to the size torchvision's Resize gives the original
      image; then CenterCrop, ToTensor, Normalize. Writes what ref writes,
      and DIR/<name>.scale (D); or DIR/<name>.err when PIL raises.
  ref_preprocess.py genlarge [--small] DIR
      Writes large photo-like JPEGs (4000x3000, 3000x4000, 2000x1500,
      1200x800, odd sizes; 4:2:0, 4:4:4, progressive, grayscale, CMYK) for
      the --fast-decode fidelity test and benchmark; --small: a few of them.
  ref_preprocess.py genbench DIR N
      Writes N JPEGs of 500-800 px (random sizes and aspect, either
      orientation, quality 85-95, 4:2:0) for the preprocessing benchmark.
  ref_preprocess.py bench [--draft] SECONDS IMG...
      Prints images/s of open+convert+transform over the IMGs, cycling, one
      line: "<images/s> <images per CPU second>". --draft: with fastref's
      Image.draft and resize(box=...) instead of torchvision's Resize.
  ref_preprocess.py bench-decode [--load-only] SECONDS IMG...
      Prints images/s of Image.open().convert("RGB") (pixels loaded; with
      --load-only Image.open().load(), no conversion or copy) over the IMGs,
      cycling, one line: "<images/s> <images per CPU second>".
"""
import argparse
import os
import sys
import time

import numpy as np
from PIL import Image


def transform(resize, crop, mean, std):
    from torchvision import transforms

    return transforms.Compose(
        [
            transforms.Resize(resize),
            transforms.CenterCrop(crop),
            transforms.ToTensor(),
            transforms.Normalize(mean, std),
        ]
    )


def load(path):
    # torchvision.datasets.folder.pil_loader
    with open(path, "rb") as f:
        img = Image.open(f)
        return img.convert("RGB")


def cmd_ref(a):
    from torchvision import transforms

    t = transform(a.resize, a.crop, a.mean, a.std)
    geo = transforms.Compose([transforms.Resize(a.resize), transforms.CenterCrop(a.crop)])
    os.makedirs(a.out, exist_ok=True)
    for p in a.images:
        name = os.path.basename(p)
        img = load(p)
        np.save(os.path.join(a.out, name + ".npy"), t(img).numpy().astype(np.float32))
        np.save(os.path.join(a.out, name + ".u8.npy"), np.asarray(geo(img), dtype=np.uint8))


def pattern(w, h, seed):
    """Smooth gradients, hard edges and noise: exercises every filter tap."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 127.5 + 127.5 * np.sin(x / max(w, 1) * 7.0 + seed)
    g = 255.0 * (y / max(h - 1, 1))
    b = np.where(((x // 17) + (y // 13)) % 2 == 0, 230.0, 20.0)
    img = np.stack([r, g, b], axis=-1) + rng.normal(0, 18, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def cmd_gen(a):
    d = a.dir
    os.makedirs(d, exist_ok=True)

    def rgb(w, h, seed=1):
        return Image.fromarray(pattern(w, h, seed), "RGB")

    # PNG, 8-bit RGB, many geometries.
    for w, h in [(500, 375), (375, 500), (224, 224), (256, 256), (257, 300), (300, 257),
                 (511, 384), (100, 80), (1, 1), (2000, 100), (3, 1000), (640, 427), (256, 700)]:
        rgb(w, h, w + h).save(os.path.join(d, f"rgb_{w}x{h}.png"))
    base = rgb(320, 240, 7)
    # Paletted, with and without transparency.
    pal = base.convert("P", palette=Image.ADAPTIVE, colors=200)
    pal.save(os.path.join(d, "p_320x240.png"))
    alpha = bytes(range(0, 250, 1))[:200]
    pal.save(os.path.join(d, "p_trns_320x240.png"), transparency=alpha)
    # RGBA with varying alpha (dropped, not composited), LA, L, 1-bit.
    rgba = base.copy()
    rgba.putalpha(Image.fromarray(pattern(320, 240, 3)[:, :, 0]))
    rgba.save(os.path.join(d, "rgba_320x240.png"))
    base.convert("LA").save(os.path.join(d, "la_320x240.png"))
    base.convert("L").save(os.path.join(d, "l_320x240.png"))
    base.convert("1").save(os.path.join(d, "bw_320x240.png"))
    rgb(300, 200, 9).convert("RGB").save(os.path.join(d, "rgb_trns_300x200.png"), transparency=(20, 20, 230))
    # 16-bit grayscale: PIL opens it as mode I and convert("RGB") clips to 255.
    g16 = (pattern(300, 200, 5)[:, :, 1].astype(np.uint16) * 3).astype(np.uint16)
    Image.fromarray(g16, "I;16").save(os.path.join(d, "l16_300x200.png"))
    # JPEG: subsamplings, progressive, grayscale, CMYK, odd sizes.
    j = rgb(500, 375, 11)
    j.save(os.path.join(d, "j420_500x375.jpg"), quality=90)
    j.save(os.path.join(d, "j444_500x375.jpg"), quality=90, subsampling=0)
    j.save(os.path.join(d, "j422_500x375.jpg"), quality=90, subsampling=1)
    j.save(os.path.join(d, "jprog_500x375.jpg"), quality=85, progressive=True)
    j.convert("L").save(os.path.join(d, "jgray_500x375.jpg"), quality=90)
    j.convert("CMYK").save(os.path.join(d, "jcmyk_500x375.jpg"), quality=90)
    rgb(333, 251, 13).save(os.path.join(d, "j420_333x251.jpg"), quality=75)
    rgb(1024, 683, 17).save(os.path.join(d, "j420_1024x683.jpg"), quality=95)


def fast_denom(w, h, resize, denoms):
    """The DCT scale featurefs's --fast-decode picks (Preprocess.dctDenom)."""
    for d in denoms:
        if min(w, h) >= d * resize:
            return d
    return 1


def open_fast(f, resize, crop_size, denoms):
    """Image.open(f) decoded as --fast-decode does; returns the resized
    (not yet cropped) RGB image and the scale used."""
    from torchvision.transforms.functional import _compute_resized_output_size

    im = Image.open(f)
    w, h = im.size
    d = fast_denom(w, h, resize, denoms) if im.format == "JPEG" else 1
    box = (0, 0, w, h)
    if d > 1:
        _, box = im.draft("RGB", (w // d, h // d))
        if im.size != ((w + d - 1) // d, (h + d - 1) // d):
            raise SystemExit(f"draft gave {im.size} for 1/{d} of {w}x{h}")
    img = im.convert("RGB")
    th, tw = _compute_resized_output_size((h, w), [resize])
    if img.size == (tw, th) and box == (0, 0, tw, th):
        return img, d  # torchvision's Resize returns such an image as is
    return img.resize((tw, th), Image.BILINEAR, box=box), d


def cmd_fastref(a):
    from torchvision import transforms

    denoms = [int(x) for x in a.denoms.split(",") if x]
    tail = transforms.Compose([transforms.CenterCrop(a.crop), transforms.ToTensor(), transforms.Normalize(a.mean, a.std)])
    os.makedirs(a.out, exist_ok=True)
    for p in a.images:
        name = os.path.basename(p)
        try:
            with open(p, "rb") as f:
                img, d = open_fast(f, a.resize, a.crop, denoms)
        except Exception as e:  # PIL's verdict, whatever it is, is the reference
            with open(os.path.join(a.out, name + ".err"), "w") as f:
                f.write(f"{type(e).__name__}: {e}\n")
            continue
        np.save(os.path.join(a.out, name + ".npy"), tail(img).numpy().astype(np.float32))
        np.save(os.path.join(a.out, name + ".u8.npy"), np.asarray(transforms.CenterCrop(a.crop)(img), dtype=np.uint8))
        with open(os.path.join(a.out, name + ".scale"), "w") as f:
            f.write(f"{d}\n")


def large_photo(w, h, seed):
    """A photo-like image of any size, cheap to make at 12 megapixels:
    layers of 1/f ("pink") noise, the power spectrum of natural images,
    each in its own tint, occluding one another through sharp-edged
    shapes (objects), softened by a lens-like blur, plus sensor noise."""
    from PIL import ImageDraw, ImageFilter

    rng = np.random.default_rng(seed)

    def pink(octaves_from=4):
        """Zero-mean 1/f noise: white noise of equal amplitude at every
        octave, from a few cells across the image down to single pixels,
        summed coarse to fine (upsample the sum, add the next octave)."""
        fw, fh = octaves_from, max(1, octaves_from * h // w)
        acc = rng.standard_normal((fh, fw), dtype=np.float32)
        while (fw, fh) != (w, h):
            fw, fh = min(w, 2 * fw), min(h, 2 * fh)
            acc = np.asarray(Image.fromarray(acc, "F").resize((fw, fh), Image.BICUBIC))
            acc = acc + rng.standard_normal((fh, fw), dtype=np.float32)
        return acc / acc.std()

    def layer():
        base = rng.uniform(40, 215, 3)
        lum = pink() * rng.uniform(18, 40)
        img = np.empty((h, w, 3), np.float32)
        for c in range(3):
            img[..., c] = base[c] + lum
        img += (pink(8) * rng.uniform(4, 12))[..., None] * rng.uniform(-1, 1, 3)
        return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")

    photo = layer()
    s = min(w, h)
    for _ in range(3):
        mask = Image.new("L", (w, h), 0)
        draw = ImageDraw.Draw(mask)
        for _ in range(8):
            x0, y0 = int(rng.uniform(-0.1, 1) * w), int(rng.uniform(-0.1, 1) * h)
            ext = int(rng.uniform(0.05, 0.4) * s)
            kind = rng.integers(0, 3)
            if kind == 0:
                draw.ellipse([x0, y0, x0 + ext, y0 + int(ext * rng.uniform(0.4, 1.6))], fill=255)
            elif kind == 1:
                pts = [(x0 + int(rng.uniform(-1, 1) * ext), y0 + int(rng.uniform(-1, 1) * ext)) for _ in range(6)]
                draw.polygon(pts, fill=255)
            else:
                draw.line([x0, y0, x0 + int(rng.uniform(-1, 1) * ext * 3), y0 + int(rng.uniform(-1, 1) * ext * 3)],
                          fill=255, width=max(1, int(rng.uniform(0.003, 0.03) * s)))
        photo = Image.composite(layer(), photo, mask)
    photo = photo.filter(ImageFilter.GaussianBlur(0.7))
    arr = np.asarray(photo, dtype=np.float32) + rng.standard_normal((h, w, 3), dtype=np.float32) * 3
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB")


def cmd_genlarge(a):
    d = a.dir
    os.makedirs(d, exist_ok=True)
    big = large_photo(4000, 3000, 1)
    mid = large_photo(2000, 1500, 2)
    big.save(os.path.join(d, "l420_4000x3000.jpg"), quality=90)
    mid.save(os.path.join(d, "m444_2000x1500.jpg"), quality=92, subsampling=0)
    big.crop((0, 0, 1200, 800)).save(os.path.join(d, "s420_1200x800.jpg"), quality=88)
    big.crop((1000, 500, 3001, 3500)).convert("CMYK").save(os.path.join(d, "lcmyk_2001x3000.jpg"), quality=90)
    if a.small:
        return
    big.save(os.path.join(d, "l444_4000x3000.jpg"), quality=95, subsampling=0)
    big.save(os.path.join(d, "lprog_4000x3000.jpg"), quality=85, progressive=True)
    big.convert("L").save(os.path.join(d, "lgray_4000x3000.jpg"), quality=90)
    big.transpose(Image.ROTATE_90).crop((0, 0, 3000, 3999)).save(os.path.join(d, "l420_3000x3999.jpg"), quality=90)
    big.crop((3, 5, 4000, 3000)).save(os.path.join(d, "l422_3997x2995.jpg"), quality=90, subsampling=1)
    large_photo(4000, 3000, 3).save(os.path.join(d, "l420b_4000x3000.jpg"), quality=80)
    mid.save(os.path.join(d, "m420_2000x1500.jpg"), quality=90)
    mid.save(os.path.join(d, "mprog_2000x1500.jpg"), quality=85, progressive=True)
    mid.convert("L").save(os.path.join(d, "mgray_2000x1500.jpg"), quality=90)
    mid.convert("CMYK").save(os.path.join(d, "mcmyk_2000x1500.jpg"), quality=90)
    mid.crop((1, 1, 1538, 1030)).save(os.path.join(d, "m420_1537x1029.jpg"), quality=90)
    big.resize((1600, 1200), Image.LANCZOS).save(os.path.join(d, "s420_1600x1200.jpg"), quality=90)
    big.crop((2000, 1000, 2800, 2000)).save(os.path.join(d, "s444_800x1000.jpg"), quality=92, subsampling=0)
    mid.crop((0, 0, 1023, 767)).save(os.path.join(d, "sprog_1023x767.jpg"), quality=85, progressive=True)
    mid.crop((500, 500, 1140, 980)).save(os.path.join(d, "x420_640x480.jpg"), quality=90)


def adobe_transform(data, transform):
    """Returns JPEG bytes with the Adobe APP14 segment's transform flag set."""
    i = data.find(b"\xff\xeeA\x00\x0eAdobe")
    if i < 0:
        i = data.find(b"Adobe") - 4
    if i < 0 or data[i : i + 2] != b"\xff\xee":
        raise SystemExit("no Adobe segment to patch")
    # marker(2) length(2) "Adobe"(5) version(2) flags0(2) flags1(2) transform(1)
    j = i + 4 + 5 + 2 + 2 + 2
    return data[:j] + bytes([transform]) + data[j + 1 :]


def cmd_genjpeg(a):
    import io

    d = a.dir
    os.makedirs(d, exist_ok=True)

    def rgb(w, h, seed=1):
        return Image.fromarray(pattern(w, h, seed), "RGB")

    j = rgb(500, 375, 11)
    j.save(os.path.join(d, "q90_420_500x375.jpg"), quality=90)
    j.save(os.path.join(d, "q90_422_500x375.jpg"), quality=90, subsampling=1)
    j.save(os.path.join(d, "q90_444_500x375.jpg"), quality=90, subsampling=0)
    j.save(os.path.join(d, "q10_420_500x375.jpg"), quality=10)
    j.save(os.path.join(d, "q100_420_500x375.jpg"), quality=100)
    j.save(os.path.join(d, "q100_444_500x375.jpg"), quality=100, subsampling=0)
    j.save(os.path.join(d, "prog_420_500x375.jpg"), quality=85, progressive=True)
    j.save(os.path.join(d, "prog_444_500x375.jpg"), quality=85, progressive=True, subsampling=0)
    j.save(os.path.join(d, "opt_422_500x375.jpg"), quality=80, optimize=True, subsampling=1)
    j.save(os.path.join(d, "smooth_420_500x375.jpg"), quality=80, smooth=50)
    j.convert("L").save(os.path.join(d, "gray_500x375.jpg"), quality=90)
    j.convert("L").save(os.path.join(d, "gray_prog_500x375.jpg"), quality=90, progressive=True)
    cmyk = j.convert("CMYK")
    cmyk.save(os.path.join(d, "cmyk_500x375.jpg"), quality=90)
    cmyk.save(os.path.join(d, "cmyk_prog_500x375.jpg"), quality=90, progressive=True)
    # PIL writes CMYK with an Adobe segment, transform 0; marked 2, libjpeg
    # reads the same bytes as YCCK and converts them to CMYK.
    for name, sub in [("ycck_444_500x375.jpg", 0), ("ycck_420_500x375.jpg", 2)]:
        b = io.BytesIO()
        cmyk.save(b, "JPEG", quality=90, subsampling=sub)
        with open(os.path.join(d, name), "wb") as f:
            f.write(adobe_transform(b.getvalue(), 2))
    # Odd sizes, each subsampling.
    for w, h in [(1, 1), (2, 1), (1, 2), (3, 3), (17, 33), (33, 17), (333, 501), (1, 700), (701, 3), (640, 427), (800, 533)]:
        im = rgb(w, h, w * 7 + h)
        im.save(os.path.join(d, f"odd_420_{w}x{h}.jpg"), quality=90)
        im.save(os.path.join(d, f"odd_422_{w}x{h}.jpg"), quality=75, subsampling=1)
        im.save(os.path.join(d, f"odd_444_{w}x{h}.jpg"), quality=95, subsampling=0)
        im.save(os.path.join(d, f"odd_prog_{w}x{h}.jpg"), quality=85, progressive=True)
    im = rgb(17, 33, 5)
    im.convert("L").save(os.path.join(d, "odd_gray_17x33.jpg"), quality=90)
    im.convert("CMYK").save(os.path.join(d, "odd_cmyk_17x33.jpg"), quality=90)
    # EXIF orientation (PIL's open/convert ignore it), ICC profile over
    # several APP2 segments, a comment.
    exif = Image.Exif()
    exif[0x0112] = 6
    j.save(os.path.join(d, "exif6_500x375.jpg"), quality=90, exif=exif.tobytes())
    icc = bytes(range(256)) * 400
    j.save(os.path.join(d, "icc_500x375.jpg"), quality=90, icc_profile=icc)
    j.save(os.path.join(d, "comment_500x375.jpg"), quality=90, comment=b"featurefs test")


def cmd_decode(a):
    os.makedirs(a.out, exist_ok=True)
    for p in a.images:
        base = os.path.join(a.out, os.path.basename(p))
        try:
            with open(p, "rb") as f:
                img = Image.open(f).convert("RGB")
        except Exception as e:  # PIL's verdict, whatever it is, is the reference
            with open(base + ".err", "w") as f:
                f.write(f"{type(e).__name__}: {e}\n")
            continue
        arr = np.asarray(img, dtype=np.uint8)
        with open(base + ".rgb", "wb") as f:
            f.write(arr.tobytes())
        with open(base + ".size", "w") as f:
            f.write(f"{img.width} {img.height}\n")


def cmd_resize(a):
    os.makedirs(a.out, exist_ok=True)
    with open(a.jobs) as f:
        jobs = [line.split() for line in f if line.strip()]
    for i, (path, w, h) in enumerate(jobs):
        with open(path, "rb") as f:
            img = Image.open(f).convert("RGB")
        out = img.resize((int(w), int(h)), Image.BILINEAR)
        with open(os.path.join(a.out, f"{i}.rgb"), "wb") as f:
            f.write(np.asarray(out, dtype=np.uint8).tobytes())


def report(n, start, cpu0):
    """Prints "<images/s wall> <images per CPU second>"."""
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    print(f"{n / wall:.1f} {n / cpu:.1f}")


def cmd_bench_decode(a):
    import io

    blobs = []
    for p in a.images:
        with open(p, "rb") as f:
            blobs.append(f.read())
    n, start, cpu0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < a.seconds:
        img = Image.open(io.BytesIO(blobs[n % len(blobs)]))
        if a.load_only:
            img.load()
        else:
            img.convert("RGB").load()
        n += 1
    report(n, start, cpu0)


def photo(w, h, seed):
    """Smooth shapes, soft texture and mild noise: closer to a photo's
    entropy than pattern()."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.zeros((h, w, 3))
    for _ in range(12):
        cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(20, max(w, h) / 2)
        col = rng.uniform(0, 255, 3)
        m = np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * r * r))
        img = img * (1 - m[..., None]) + col * m[..., None]
    img += 12 * np.sin(x / rng.uniform(3, 9))[..., None] * np.cos(y / rng.uniform(3, 9))[..., None]
    img += rng.normal(0, 14, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def cmd_genbench(a):
    os.makedirs(a.dir, exist_ok=True)
    rng = np.random.default_rng(3)
    for i in range(a.n):
        long = int(rng.integers(500, 801))
        short = int(long * rng.uniform(0.62, 0.9))
        w, h = (long, short) if i % 3 else (short, long)
        q = int(rng.integers(85, 96))
        Image.fromarray(photo(w, h, i), "RGB").save(os.path.join(a.dir, f"b{i:03d}_{w}x{h}.jpg"), quality=q)


def cmd_bench(a):
    import torch
    from torchvision import transforms

    torch.set_num_threads(1)  # one core, as the Go side
    t = transform(256, 224, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    import io

    blobs = []
    for p in a.images:
        with open(p, "rb") as f:
            blobs.append(f.read())
    if a.draft:
        tail = transforms.Compose([transforms.CenterCrop(224), transforms.ToTensor(),
                                   transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    n, start, cpu0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < a.seconds:
        if a.draft:
            img, _ = open_fast(io.BytesIO(blobs[n % len(blobs)]), 256, 224, [8, 4, 2])
            tail(img)
        else:
            img = Image.open(io.BytesIO(blobs[n % len(blobs)])).convert("RGB")
            t(img)
        n += 1
    report(n, start, cpu0)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("ref")
    r.add_argument("--resize", type=int, default=256)
    r.add_argument("--crop", type=int, default=224)
    r.add_argument("--mean", type=float, nargs=3, default=[0.485, 0.456, 0.406])
    r.add_argument("--std", type=float, nargs=3, default=[0.229, 0.224, 0.225])
    r.add_argument("--out", required=True)
    r.add_argument("images", nargs="+")
    g = sub.add_parser("gen")
    g.add_argument("dir")
    b = sub.add_parser("bench")
    b.add_argument("--draft", action="store_true")
    b.add_argument("seconds", type=float)
    b.add_argument("images", nargs="+")
    gb = sub.add_parser("genbench")
    gb.add_argument("dir")
    gb.add_argument("n", type=int)
    fr = sub.add_parser("fastref")
    fr.add_argument("--resize", type=int, default=256)
    fr.add_argument("--crop", type=int, default=224)
    fr.add_argument("--mean", type=float, nargs=3, default=[0.485, 0.456, 0.406])
    fr.add_argument("--std", type=float, nargs=3, default=[0.229, 0.224, 0.225])
    fr.add_argument("--denoms", default="8,4,2")
    fr.add_argument("--out", required=True)
    fr.add_argument("images", nargs="+")
    gl = sub.add_parser("genlarge")
    gl.add_argument("--small", action="store_true")
    gl.add_argument("dir")
    gj = sub.add_parser("genjpeg")
    gj.add_argument("dir")
    dc = sub.add_parser("decode")
    dc.add_argument("out")
    dc.add_argument("images", nargs="+")
    rs = sub.add_parser("resize")
    rs.add_argument("jobs")
    rs.add_argument("out")
    bd = sub.add_parser("bench-decode")
    bd.add_argument("--load-only", action="store_true")
    bd.add_argument("seconds", type=float)
    bd.add_argument("images", nargs="+")
    a = ap.parse_args()
    cmds = {"ref": cmd_ref, "gen": cmd_gen, "bench": cmd_bench, "genjpeg": cmd_genjpeg,
            "decode": cmd_decode, "resize": cmd_resize, "bench-decode": cmd_bench_decode, "genbench": cmd_genbench,
            "fastref": cmd_fastref, "genlarge": cmd_genlarge}
    cmds[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
