#!/usr/bin/env python3
"""The JPEG kinds of make gpu-check's decode step (scripts/gpu_check.py
jpegs): ImageNet-like pictures saved as 4:2:0, 4:2:2 and 4:4:4 baseline
JPEGs, grayscale, baseline JPEGs with restart markers, and two kinds the GPU
decoder is expected to refuse (progressive, CMYK) so that the CPU fallback
runs. Only numpy and PIL.

Restart markers: Pillow writes them only from 10.2 on (restart_marker_blocks,
restart_marker_rows), and the build machine's Pillow is 9.4, so this module
writes those files itself with a small baseline encoder (write_restart_jpeg:
JFIF YCbCr or grayscale, 4:2:0, 4:2:2 or 4:4:4, the standard quantization
tables scaled by quality as libjpeg does, the standard Huffman tables, a DRI
segment and an RST marker every interval MCUs). The same bytes come out on
every machine, whatever its Pillow. Each file is checked as it is made: PIL
decodes it, its pixels are close to the picture encoded, and its scan holds
the RST markers expected (check_restart_jpeg); a file that fails is an error,
never written.

    python3 scripts/jpeg_kinds.py --self-test    encode, decode and check a few
"""
import io
import struct
import sys

import numpy as np

# The kinds, in the order a set cycles through them (20 a cycle, so that any
# 7 consecutive images hold every kind and 1,000 images hold 250 4:2:0, 150
# each of 4:2:2, 4:4:4 and gray, 200 restart-marker, 50 progressive and 50
# CMYK files).
CYCLE = ["420", "422", "444", "gray", "restart", "progressive", "cmyk",
         "420", "restart", "422", "444", "420", "gray", "restart",
         "420", "422", "444", "restart", "420", "gray"]
# what each kind is, for the report
DESCRIBE = {
    "420": "baseline, YCbCr 4:2:0 (PIL)",
    "422": "baseline, YCbCr 4:2:2 (PIL)",
    "444": "baseline, YCbCr 4:4:4 (PIL)",
    "gray": "baseline, grayscale (PIL)",
    "restart": "baseline with restart markers (DRI, RST every 1 MCU to 3 MCU rows; 4:2:0, 4:2:2 or 4:4:4; scripts/jpeg_kinds.py's encoder)",
    "progressive": "progressive 4:2:0 (PIL): the GPU decoder is expected to refuse it",
    "cmyk": "Adobe CMYK (PIL): the GPU decoder is expected to refuse it",
    "gen": "scripts/gen_dataset.py's JPEGs and PNGs (40-700 px; baseline, progressive, gray, 4:4:4; PNGs always decode on the CPU)",
}

# ITU T.81 Annex K: the luminance and chrominance quantization tables (in
# natural order) and the standard Huffman tables (bits, values).
_QL = np.array([
    16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55,
    14, 13, 16, 24, 40, 57, 69, 56, 14, 17, 22, 29, 51, 87, 80, 62,
    18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
    49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99], np.int64)
_QC = np.array([
    17, 18, 24, 47, 99, 99, 99, 99, 18, 21, 26, 66, 99, 99, 99, 99,
    24, 26, 56, 99, 99, 99, 99, 99, 47, 66, 99, 99, 99, 99, 99, 99] + [99] * 32, np.int64)
_DC_L = ([0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0], list(range(12)))
_DC_C = ([0, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0], list(range(12)))
_AC_L = ([0, 2, 1, 3, 3, 2, 4, 3, 5, 5, 4, 4, 0, 0, 1, 0x7d], [
    0x01, 0x02, 0x03, 0x00, 0x04, 0x11, 0x05, 0x12, 0x21, 0x31, 0x41, 0x06, 0x13, 0x51, 0x61, 0x07,
    0x22, 0x71, 0x14, 0x32, 0x81, 0x91, 0xa1, 0x08, 0x23, 0x42, 0xb1, 0xc1, 0x15, 0x52, 0xd1, 0xf0,
    0x24, 0x33, 0x62, 0x72, 0x82, 0x09, 0x0a, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x25, 0x26, 0x27, 0x28,
    0x29, 0x2a, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49,
    0x4a, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69,
    0x6a, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89,
    0x8a, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7,
    0xa8, 0xa9, 0xaa, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xc2, 0xc3, 0xc4, 0xc5,
    0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xe1, 0xe2,
    0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8,
    0xf9, 0xfa])
_AC_C = ([0, 2, 1, 2, 4, 4, 3, 4, 7, 5, 4, 4, 0, 1, 2, 0x77], [
    0x00, 0x01, 0x02, 0x03, 0x11, 0x04, 0x05, 0x21, 0x31, 0x06, 0x12, 0x41, 0x51, 0x07, 0x61, 0x71,
    0x13, 0x22, 0x32, 0x81, 0x08, 0x14, 0x42, 0x91, 0xa1, 0xb1, 0xc1, 0x09, 0x23, 0x33, 0x52, 0xf0,
    0x15, 0x62, 0x72, 0xd1, 0x0a, 0x16, 0x24, 0x34, 0xe1, 0x25, 0xf1, 0x17, 0x18, 0x19, 0x1a, 0x26,
    0x27, 0x28, 0x29, 0x2a, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48,
    0x49, 0x4a, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68,
    0x69, 0x6a, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87,
    0x88, 0x89, 0x8a, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0xa2, 0xa3, 0xa4, 0xa5,
    0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xc2, 0xc3,
    0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda,
    0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8,
    0xf9, 0xfa])

_ZIGZAG = np.array([
    0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5,
    12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6, 7, 14, 21, 28,
    35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
    58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63])

# the 8-point DCT-II matrix (orthonormal): coefficients = C @ block @ C.T
_K = np.arange(8)
_C = np.sqrt(2 / 8) * np.cos((2 * _K[None, :] + 1) * _K[:, None] * np.pi / 16)
_C[0] /= np.sqrt(2)

# sampling factors (h, v) of the first component; the others are 1x1
SUBSAMPLING = {"444": (1, 1), "422": (2, 1), "420": (2, 2)}


def _huff_codes(table):
    """symbol -> (code, length) of a (bits, values) table (T.81 Annex C)."""
    bits, vals = table
    codes, code, k = {}, 0, 0
    for length in range(1, 17):
        for _ in range(bits[length - 1]):
            codes[vals[k]] = (code, length)
            code += 1
            k += 1
        code <<= 1
    return codes


_HUFF = {"dc_l": _huff_codes(_DC_L), "dc_c": _huff_codes(_DC_C), "ac_l": _huff_codes(_AC_L), "ac_c": _huff_codes(_AC_C)}


def _qtable(base, quality):
    """libjpeg's jpeg_quality_scaling and jpeg_add_quant_table (baseline: 1..255)."""
    quality = min(max(int(quality), 1), 100)
    scale = 5000 // quality if quality < 50 else 200 - quality * 2
    return np.clip((base * scale + 50) // 100, 1, 255)


class _Bits:
    """A bit writer with JPEG's byte stuffing (0xFF -> 0xFF 0x00)."""

    def __init__(self):
        self.out = bytearray()
        self.acc = 0
        self.n = 0

    def put(self, code, length):
        self.acc = (self.acc << length) | code
        self.n += length
        while self.n >= 8:
            self.n -= 8
            b = (self.acc >> self.n) & 0xFF
            self.out.append(b)
            if b == 0xFF:
                self.out.append(0)
        self.acc &= (1 << self.n) - 1

    def align(self):
        """Pads the last byte with 1 bits (T.81 F.1.2.3)."""
        if self.n:
            self.put((1 << (8 - self.n)) - 1, 8 - self.n)


def _blocks(plane, bh, bw):
    """An (H, W) plane whose sides are multiples of 8 as (bh, bw, 8, 8) blocks."""
    return plane.reshape(bh, 8, bw, 8).transpose(0, 2, 1, 3)


def _quantized(plane, q, bh, bw):
    """The plane's blocks DCT'd, quantized and in zigzag order: (bh, bw, 64) int64."""
    b = _blocks(plane.astype(np.float64) - 128.0, bh, bw)
    d = np.einsum("ij,abjk,lk->abil", _C, b, _C)
    zq = np.round(d.reshape(bh, bw, 64) / q.reshape(64)).astype(np.int64)
    return zq[:, :, _ZIGZAG]


def write_restart_jpeg(rgb, quality=90, subsampling="420", interval=1):
    """Baseline JPEG bytes of rgb (an (H, W, 3) or (H, W) uint8 array) with
    a restart interval of `interval` MCUs (DRI) and an RST marker after every
    interval but the last. subsampling: "420", "422" or "444" (ignored for
    gray)."""
    if interval < 1 or interval > 65535:
        raise ValueError(f"restart interval {interval}: want 1..65535")
    rgb = np.asarray(rgb)
    gray = rgb.ndim == 2
    h, w = rgb.shape[:2]
    if gray:
        planes = [rgb.astype(np.float64)]
        hs, vs = 1, 1
    else:
        hs, vs = SUBSAMPLING[subsampling]
        r, g, b = (rgb[..., i].astype(np.float64) for i in range(3))
        # JFIF YCbCr (libjpeg's jccolor.c)
        planes = [0.299 * r + 0.587 * g + 0.114 * b,
                  -0.168735892 * r - 0.331264108 * g + 0.5 * b + 128,
                  0.5 * r - 0.418687589 * g - 0.081312411 * b + 128]
    mw, mh = 8 * hs, 8 * vs  # the MCU in pixels
    mx, my = -(-w // mw), -(-h // mh)  # MCUs across and down
    pw, ph = mx * mw, my * mh
    comps = []
    for ci, p in enumerate(planes):
        p = np.pad(p, ((0, ph - h), (0, pw - w)), mode="edge")
        ch, cv = (hs, vs) if ci == 0 else (1, 1)
        if ci > 0 and (hs, vs) != (1, 1):  # box downsampling, as libjpeg's h2v1/h2v2
            p = p.reshape(ph // vs, vs, pw // hs, hs).mean(axis=(1, 3))
        q = _qtable(_QL if ci == 0 else _QC, quality)
        zq = _quantized(np.clip(np.round(p), 0, 255), q, my * cv, mx * ch)
        comps.append((ch, cv, zq, q, "l" if ci == 0 else "c"))

    bits = _Bits()
    pred = [0] * len(comps)
    nmcu = mx * my
    for m in range(nmcu):
        if m and m % interval == 0:  # restart: align, marker, reset the DC predictions
            bits.align()
            bits.out += bytes([0xFF, 0xD0 + ((m // interval - 1) % 8)])
            pred = [0] * len(comps)
        y0, x0 = divmod(m, mx)
        for ci, (ch, cv, zq, _, t) in enumerate(comps):
            dc, ac = _HUFF["dc_" + t], _HUFF["ac_" + t]
            for by in range(y0 * cv, y0 * cv + cv):
                for bx in range(x0 * ch, x0 * ch + ch):
                    blk = zq[by, bx]
                    diff = int(blk[0]) - pred[ci]
                    pred[ci] = int(blk[0])
                    s = abs(diff).bit_length()
                    bits.put(*dc[s])
                    if s:
                        bits.put(diff if diff > 0 else diff + (1 << s) - 1, s)
                    last = 0
                    for k in (np.flatnonzero(blk[1:]) + 1).tolist():
                        v = int(blk[k])
                        s = abs(v).bit_length()
                        run = k - last - 1
                        while run > 15:
                            bits.put(*ac[0xF0])
                            run -= 16
                        bits.put(*ac[(run << 4) | s])
                        bits.put(v if v > 0 else v + (1 << s) - 1, s)
                        last = k
                    if last != 63:
                        bits.put(*ac[0x00])
    bits.align()

    def seg(marker, payload):
        return struct.pack(">BBH", 0xFF, marker, len(payload) + 2) + payload

    out = bytearray(b"\xff\xd8")
    out += seg(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
    out += seg(0xDB, bytes([0]) + bytes(int(x) for x in comps[0][3][_ZIGZAG]))
    if not gray:
        out += seg(0xDB, bytes([1]) + bytes(int(x) for x in comps[1][3][_ZIGZAG]))
    sof = struct.pack(">BHHB", 8, h, w, len(comps))
    for ci, (ch, cv, *_rest) in enumerate(comps):
        sof += bytes([ci + 1, (ch << 4) | cv, 0 if ci == 0 else 1])
    out += seg(0xC0, sof)
    for cls, tid, table in ((0, 0, _DC_L), (1, 0, _AC_L)) + (() if gray else ((0, 1, _DC_C), (1, 1, _AC_C))):
        out += seg(0xC4, bytes([(cls << 4) | tid] + table[0] + table[1]))
    out += seg(0xDD, struct.pack(">H", interval))
    sos = bytes([len(comps)])
    for ci in range(len(comps)):
        sos += bytes([ci + 1, 0x00 if ci == 0 else 0x11])
    out += seg(0xDA, sos + bytes([0, 63, 0]))
    out += bits.out
    out += b"\xff\xd9"
    return bytes(out)


def restart_markers(data):
    """The number of RST markers (FFD0-FFD7) in a JPEG's bytes and the DRI
    interval (0 without one)."""
    n = sum(data.count(bytes([0xFF, 0xD0 + i])) for i in range(8))
    i = data.find(b"\xff\xdd\x00\x04")
    return n, (struct.unpack(">H", data[i + 4:i + 6])[0] if i >= 0 else 0)


def check_restart_jpeg(data, rgb, interval, quality=90, subsampling="420"):
    """Raises unless PIL decodes data to pixels as close to rgb as PIL's own
    JPEG of rgb at the same quality and subsampling (mean absolute error at
    most 10% + 0.5 more) and data holds DRI = interval and the RST markers a
    scan of that many MCUs needs. Returns the mean absolute error."""
    from PIL import Image
    rgb = np.asarray(rgb)
    mode = "L" if rgb.ndim == 2 else "RGB"
    with Image.open(io.BytesIO(data)) as im:
        im.load()
        got = np.asarray(im.convert(mode))
    if got.shape != rgb.shape:
        raise ValueError(f"restart JPEG decodes to {got.shape}, want {rgb.shape}")
    err = np.abs(got.astype(np.int64) - rgb).mean()
    buf = io.BytesIO()
    Image.fromarray(rgb, mode).save(buf, "JPEG", quality=quality,
                                    **({} if mode == "L" else {"subsampling": {"444": 0, "422": 1, "420": 2}[subsampling]}))
    with Image.open(io.BytesIO(buf.getvalue())) as im:
        pil = np.asarray(im.convert(mode))
    pil_err = np.abs(pil.astype(np.int64) - rgb).mean()
    if err > 1.1 * pil_err + 0.5:
        raise ValueError(f"restart JPEG decodes with a mean absolute error of {err:.2f}; PIL's own JPEG at quality "
                         f"{quality} {subsampling}: {pil_err:.2f}")
    n, dri = restart_markers(data)
    if dri != interval:
        raise ValueError(f"restart JPEG: DRI {dri}, want {interval}")
    h, w = rgb.shape[:2]
    hs, vs = (1, 1) if mode == "L" else SUBSAMPLING[subsampling]  # the MCU write_restart_jpeg used
    want = (-(-w // (8 * hs)) * -(-h // (8 * vs)) - 1) // interval
    if n != want:
        raise ValueError(f"restart JPEG: {n} RST markers, want {want}")
    return err


def save_kind(img, kind, path, rng):
    """Saves the PIL RGB image img as a JPEG of kind (CYCLE) to path; returns
    a dict describing it (kind, quality, subsampling, restart interval)."""
    q = int(rng.integers(75, 96))
    info = {"kind": kind, "quality": q}
    if kind in ("420", "422", "444"):
        img.save(path, "JPEG", quality=q, subsampling={"444": 0, "422": 1, "420": 2}[kind])
    elif kind == "gray":
        img.convert("L").save(path, "JPEG", quality=q)
    elif kind == "progressive":
        img.save(path, "JPEG", quality=q, progressive=True, subsampling=2)
    elif kind == "cmyk":
        img.convert("CMYK").save(path, "JPEG", quality=q)
    elif kind == "restart":
        sub = ["420", "422", "444"][int(rng.integers(0, 3))]
        hs, _ = SUBSAMPLING[sub]
        mcus_across = -(-img.width // (8 * hs))
        interval = int(rng.choice([1, 2, 5, mcus_across, 3 * mcus_across]))
        a = np.asarray(img)
        data = write_restart_jpeg(a, q, sub, interval)
        check_restart_jpeg(data, a, interval, q, sub)
        with open(path, "wb") as f:
            f.write(data)
        info.update(subsampling=sub, restart_interval=interval, rst_markers=restart_markers(data)[0])
    else:
        raise ValueError(f"unknown JPEG kind {kind}")
    return info


def _self_test():
    from PIL import Image
    rng = np.random.default_rng(1)
    for h, w in ((37, 53), (64, 64), (121, 200)):
        yy, xx = np.mgrid[0:h, 0:w]
        a = np.stack([xx * 255 // max(w - 1, 1), yy * 255 // max(h - 1, 1), (xx + yy) % 256], -1).astype(np.uint8)
        a = np.clip(a + rng.normal(0, 4, a.shape), 0, 255).astype(np.uint8)
        for sub in ("420", "422", "444"):
            for interval in (1, 3, 1000):
                data = write_restart_jpeg(a, 90, sub, interval)
                err = check_restart_jpeg(data, a, interval, 90, sub)
                print(f"{w}x{h} {sub} interval {interval}: {len(data)} bytes, {restart_markers(data)[0]} RST, mean abs error {err:.2f}")
        g = a[..., 0]
        data = write_restart_jpeg(g, 85, "420", 2)
        err = check_restart_jpeg(data, g, 2, 85)
        print(f"{w}x{h} gray interval 2: {len(data)} bytes, mean abs error {err:.2f}")
    # a PIL baseline of the same picture at the same quality, for scale
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "JPEG", quality=90, subsampling=2)
    print(f"PIL's 4:2:0 q90 of the last: {len(buf.getvalue())} bytes")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(_self_test())
    print(__doc__, file=sys.stderr)
    sys.exit(2)
