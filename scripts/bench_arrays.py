#!/usr/bin/python3
"""Array views' benchmark (issue 50; scripts/bench-arrays.sh runs it).

    bench_arrays.py export --out MODEL.onnx
    bench_arrays.py epoch1 --array A.npy --pid PID --out JSON      one in-order pass over an array view
    bench_arrays.py extract --bin B --model M --layer L --src DIR --out JSON   featurefs extract of the same images
    bench_arrays.py cached --kind array|local|perfile --path P --out JSON
    bench_arrays.py report --round KIND=JSON...

The near-free model ("pool2048"): Conv2d(3, 64, 16, stride=16), a 1x1
Conv2d(64, 2048), ReLU, global average pooling and flatten: its last
layer is a (2048,) vector, ResNet-50 layer18's shape, at a few MFLOPs, so
that a pass over 10,000 images measures the mount, not the model (on a GPU
host the model is nearly free too). "cached" reads a whole array (or the
per-file tree with DatasetFolder and np.stack) with the page cache dropped
first (cold), then again (hot).
"""
import argparse
import json
import os
import subprocess
import time

import numpy as np

from benchlib import cell, drop_caches, med, proc_cpu, self_cpu

TARGET_LOCAL = 0.8     # cached array through the mount >= 0.8x a local .npy
TARGET_PERFILE = 20.0  # and >= 20x the per-file DatasetFolder stack
TARGET_RATE = 0.95     # epoch 1 >= 0.95x featurefs extract's images/s
TARGET_CPU = 1.2       # at <= 1.2x its CPU per image


def cmd_export(args):
    import torch
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 16, stride=16), torch.nn.Conv2d(64, 2048, 1), torch.nn.ReLU(),
                            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()).eval()
    tmp = args.out + ".tmp"
    torch.onnx.export(m, torch.randn(1, 3, 224, 224), tmp, opset_version=17, input_names=["input"],
                      output_names=["output"], dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    os.replace(tmp, args.out)


def cmd_epoch1(args):
    """np.load(mmap_mode="r") and one in-order pass, a block of rows at a time."""
    c0, m0, t0 = self_cpu()[0], proc_cpu(args.pid), time.perf_counter()
    X = np.load(args.array, mmap_mode="r")
    s = 0.0
    for i in range(0, X.shape[0], 256):
        s += float(np.asarray(X[i:i + 256]).sum(dtype=np.float64))
    sec = time.perf_counter() - t0
    out = {"rows": int(X.shape[0]), "seconds": sec, "reader_cpu": self_cpu()[0] - c0,
           "mount_cpu": proc_cpu(args.pid) - m0, "nan": bool(np.isnan(s))}
    json.dump(out, open(args.out, "w"))


def cmd_extract(args):
    outdir = args.out + ".d"
    t0 = time.perf_counter()
    r0 = os.times()
    subprocess.run([args.bin, "extract", "--model", args.model, "--layer", args.layer, "--device", "cpu",
                    args.src, "-o", outdir], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r1 = os.times()
    sec = time.perf_counter() - t0
    n = sum(len(fs) for _, _, fs in os.walk(outdir))
    subprocess.run(["rm", "-rf", outdir], check=True)
    json.dump({"rows": n, "seconds": sec, "cpu": (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system)},
              open(args.out, "w"))


def read_all(kind, path):
    if kind == "perfile":
        import torchvision
        ds = torchvision.datasets.DatasetFolder(path, loader=np.load, extensions=(".npy",))
        X = np.stack([np.load(p) for p, _ in ds.samples])
    else:
        X = np.array(np.load(path, mmap_mode="r"))
    return X.shape[0], float(X.sum(dtype=np.float64))


def cmd_cached(args):
    out = {}
    drop_caches()
    t0 = time.perf_counter()
    out["rows"], out["sum"] = read_all(args.kind, args.path)
    out["cold"] = time.perf_counter() - t0
    hot = []
    for _ in range(5):  # hot: the median of 5 reads (tens of milliseconds each)
        t0 = time.perf_counter()
        read_all(args.kind, args.path)
        hot.append(time.perf_counter() - t0)
    out["hot"] = sorted(hot)[2]
    json.dump(out, open(args.out, "w"))


def cmd_report(args):
    rounds = []
    for r in args.round:
        d = {}
        for kv in r:
            k, _, p = kv.partition("=")
            d[k] = json.load(open(p))
        rounds.append(d)
    nr = len(rounds)
    verdict = lambda ok: ("**met**" if ok else "**missed**") if nr >= 3 else "(fewer than 3 rounds: no verdict)"
    rate = lambda r, k: r[k]["rows"] / r[k]["seconds"]
    ep_ratio = [rate(r, "array1") / rate(r, "extract") for r in rounds]
    cpu_img = lambda r: (r["array1"]["mount_cpu"] + r["array1"]["reader_cpu"]) / r["array1"]["rows"]
    cpu_ratio = [cpu_img(r) / (r["extract"]["cpu"] / r["extract"]["rows"]) for r in rounds]
    # speed ratios of the array view: the other's time / the array's
    vs_local = {ph: [r["local"][ph] / r["array"][ph] for r in rounds] for ph in ("cold", "hot")}
    vs_perfile = {ph: [r["perfile"][ph] / r["array"][ph] for r in rounds] for ph in ("cold", "hot")}
    n = rounds[0]["array1"]["rows"]
    sums_equal = all(abs(r["array"]["sum"] - r["local"]["sum"]) < 1e-6 * max(1.0, abs(r["local"]["sum"])) and
                     abs(r["array"]["sum"] - r["perfile"]["sum"]) < 1e-6 * max(1.0, abs(r["local"]["sum"])) for r in rounds)
    t = lambda k, ph: [r[k][ph] for r in rounds]
    print(f"""## Array views: one (N, 2048) array of {n:,} rows (issue 50)

Each figure: median (min-max) of {nr} interleaved rounds, one run.
The near-free `pool2048` model (scripts/bench_arrays.py: its last layer is (2048,), ResNet-50 layer18's
shape, at a few MFLOPs: on a GPU host the model is nearly free too, so what the mount costs decides).
Epoch 1: a fresh mount and cache per round, `np.load(mmap_mode="r")` of `arrays/pool2048/layerN/train.npy`
read in order 256 rows at a time, against `featurefs extract` of the same JPEGs to a directory. Cached:
after that pass, the whole array read with `np.array(np.load(..., mmap_mode="r"))`, the page cache dropped
first (cold) and then 5 times more (hot: their median), against the same array saved as a local `.npy` (`local`) and
DatasetFolder + `np.stack` of the per-file views (`perfile`). Sums equal across the three: {sums_equal}.

| | seconds, cold | seconds, hot |
|---|---|---|
| array view through the mount | {cell(t('array', 'cold'))} | {cell(t('array', 'hot'))} |
| local .npy | {cell(t('local', 'cold'))} | {cell(t('local', 'hot'))} |
| per-file DatasetFolder + np.stack through the mount | {cell(t('perfile', 'cold'))} | {cell(t('perfile', 'hot'))} |

| Target | Measured | Verdict |
|---|---|---|
| cached array >= {TARGET_LOCAL}x a local .npy (cold / hot) | {cell(vs_local['cold'])} / {cell(vs_local['hot'])} | {verdict(med(vs_local['cold']) >= TARGET_LOCAL and med(vs_local['hot']) >= TARGET_LOCAL)} |
| cached array >= {TARGET_PERFILE:.0f}x the per-file stack (cold / hot) | {cell(vs_perfile['cold'], '{:.1f}')} / {cell(vs_perfile['hot'], '{:.1f}')} | {verdict(med(vs_perfile['cold']) >= TARGET_PERFILE and med(vs_perfile['hot']) >= TARGET_PERFILE)} |
| epoch 1: array images/s >= {TARGET_RATE}x `featurefs extract`'s | {cell(ep_ratio)} ({cell([rate(r, 'array1') for r in rounds], '{:.0f}')} vs {cell([rate(r, 'extract') for r in rounds], '{:.0f}')} images/s) | {verdict(med(ep_ratio) >= TARGET_RATE)} |
| epoch 1: CPU per image (mount + reader) <= {TARGET_CPU}x extract's | {cell(cpu_ratio)} | {verdict(med(cpu_ratio) <= TARGET_CPU)} |

Medians as ratios: epoch 1 {med(ep_ratio):.2f}x `featurefs extract`'s images/s at {med(cpu_ratio):.2f}x its CPU per image;
the cached array {med(vs_local['cold']):.2f}x (cold) and {med(vs_local['hot']):.2f}x (hot) a local .npy's speed,
{med(vs_perfile['cold']):.1f}x and {med(vs_perfile['hot']):.1f}x the per-file stack's.
""")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("export"); s.add_argument("--out", required=True)
    s = sub.add_parser("epoch1"); s.add_argument("--array", required=True); s.add_argument("--pid", type=int, required=True); s.add_argument("--out", required=True)
    s = sub.add_parser("extract")
    for a in ("--bin", "--model", "--layer", "--src", "--out"):
        s.add_argument(a, required=True)
    s = sub.add_parser("cached"); s.add_argument("--kind", required=True); s.add_argument("--path", required=True); s.add_argument("--out", required=True)
    s = sub.add_parser("report"); s.add_argument("--round", nargs="+", action="append", required=True)
    args = ap.parse_args()
    {"export": cmd_export, "epoch1": cmd_epoch1, "extract": cmd_extract, "cached": cmd_cached, "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    main()
