#!/usr/bin/python3
"""Transfer-learning epochs: PyTorch alone vs featurefs (scripts/bench-epoch.sh runs it).

    /usr/bin/python3 scripts/bench_epoch.py upload --endpoint URL --bucket B --dir DIR
    /usr/bin/python3 scripts/bench_epoch.py baseline --endpoint URL --bucket B [--epochs 3]
    /usr/bin/python3 scripts/bench_epoch.py featurefs --bin BIN --model PATH --endpoint URL
        --bucket B --mnt DIR --cache-dir DIR --log FILE --prefetch tree|off [--epochs 3]
    /usr/bin/python3 scripts/bench_epoch.py report --round KIND=J KIND=J KIND=J [--round ...] [...]

The baseline is what a user writes today with PyTorch alone: an
ImageFolder-like Dataset whose __getitem__ GETs the JPEG from the bucket with
boto3 and applies torchvision's Resize(256)/CenterCrop(224)/ToTensor/Normalize;
the training loop runs the frozen ResNet-50 (scripts/export_model.py's build(),
same seeded weights as the ONNX file featurefs serves) up to layer12
(layer3[3], 1024x14x14) under no_grad on every batch of every epoch, global
average pools it and trains a linear head with SGD.

featurefs: `featurefs mount s3://B` with --endpoint-url, then an unmodified
DatasetFolder(MOUNT/features/resnet50/layer12/train, loader=np.load,
extensions=(".npy",)) feeding the same head on the same pooled features.

Both: DataLoader(batch_size=32, shuffle=True, num_workers=4), torch threads 2,
the same seed for the head and the shuffle order, 3 epochs. Each subcommand
prints JSON on stdout, with the 1-minute load average at its start and end;
report prints one markdown section.

report takes one --round per interleaved round: KIND=JSON for baseline, tree
and off, in the order they ran. Each figure is the median over the rounds with
its min-max; each ratio is computed within a round (baseline and featurefs of
the same round), and its verdict comes from the median of those per-round
ratios.
"""
import argparse
import io
import json
import os
import shlex
import sys
import time
import warnings

import numpy as np
import torch
import torchvision
from PIL import Image

from bench_torch_extract import TF, truncated
from benchlib import cell, loadavg, med, mount, read_stats, s3_client, span, unmount
from export_model import build

warnings.filterwarnings("ignore", message="This DataLoader will create")

IMAGE_EXTS = (".jpg", ".jpeg", ".png")


def cmd_upload(args):
    s3 = s3_client(args.endpoint)
    s3.create_bucket(Bucket=args.bucket)
    n = nbytes = 0
    for root, _, files in os.walk(args.dir):
        for name in sorted(files):
            p = os.path.join(root, name)
            key = os.path.relpath(p, args.dir).replace(os.sep, "/")
            with open(p, "rb") as f:
                data = f.read()
            s3.put_object(Bucket=args.bucket, Key=key, Body=data)
            n += 1
            nbytes += len(data)
    json.dump({"objects": n, "bytes": nbytes}, sys.stdout)


class S3ImageFolder(torch.utils.data.Dataset):
    """ImageFolder over BUCKET/PREFIX/<class>/<image>: GET with boto3, PIL, transforms."""

    def __init__(self, endpoint, bucket, prefix):
        self.endpoint, self.bucket = endpoint, bucket
        keys = []
        pages = s3_client(endpoint).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for page in pages:
            keys += [o["Key"] for o in page.get("Contents", []) if o["Key"].lower().endswith(IMAGE_EXTS)]
        keys.sort()
        self.classes = sorted({k[len(prefix):].split("/")[0] for k in keys})
        idx = {c: i for i, c in enumerate(self.classes)}
        self.samples = [(k, idx[k[len(prefix):].split("/")[0]]) for k in keys]
        self._s3 = None  # one client per worker process, made on first use

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        if self._s3 is None:
            self._s3 = s3_client(self.endpoint)
        key, label = self.samples[i]
        body = self._s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        with Image.open(io.BytesIO(body)) as im:
            return TF(im.convert("RGB")), label


def trunk_layer12(model):
    """ResNet-50 up to featurefs's layer12 (layer3[3]): output 1024x14x14, frozen."""
    trunk = truncated(model, "layer12")
    for p in trunk.parameters():
        p.requires_grad_(False)
    return trunk


def train(dl, n_classes, epochs, features, on_epoch=None):
    """Trains a linear head on pooled layer12 features; returns per-epoch figures."""
    torch.manual_seed(1)
    # A linear probe: the pooled features standardized by a BatchNorm without
    # parameters (random-weight features have norms near 750), then Linear.
    head = torch.nn.Sequential(torch.nn.BatchNorm1d(1024, affine=False), torch.nn.Linear(1024, n_classes))
    opt = torch.optim.SGD(head.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    out = []
    for e in range(epochs):
        t0 = time.perf_counter()
        n = correct = 0
        total_loss = 0.0
        for x, y in dl:
            with torch.no_grad():
                f = features(x)  # B x 1024 x 14 x 14
                pooled = f.float().mean(dim=(2, 3))
            logits = head(pooled)
            loss = loss_fn(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            n += len(y)
            correct += int((logits.argmax(1) == y).sum())
            total_loss += float(loss) * len(y)
        rec = {"seconds": time.perf_counter() - t0, "samples": n, "loss": total_loss / max(n, 1),
               "train_acc": correct / max(n, 1), "load": loadavg()}
        if on_epoch:
            rec.update(on_epoch(e))
        out.append(rec)
        print(f"  epoch {e + 1}: {rec['seconds']:.2f}s, {n} samples, loss {rec['loss']:.4f}", file=sys.stderr)
    return out


def loader(ds, args):
    g = torch.Generator().manual_seed(0)
    return torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=args.workers,
                                       generator=g)


def cmd_baseline(args):
    load0 = loadavg()
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    trunk = trunk_layer12(build("resnet50", 0))
    ds = S3ImageFolder(args.endpoint, args.bucket, "train/")
    dl = loader(ds, args)
    setup = time.perf_counter() - t0
    epochs = train(dl, len(ds.classes), args.epochs, trunk)
    json.dump({"setup_seconds": setup, "epochs": epochs, "samples": len(ds), "classes": ds.classes,
               "load_start": load0, "load_end": loadavg()}, sys.stdout)


def cmd_featurefs(args):
    load0 = loadavg()
    torch.set_num_threads(args.threads)
    cmd = [args.bin, "mount", "--model", f"resnet50={args.model}", "--endpoint-url", args.endpoint,
           "--cache-dir", args.cache_dir, "--log-file", args.log, "--device", args.device,
           "--prefetch", args.prefetch, *shlex.split(args.extra), f"s3://{args.bucket}", args.mnt]
    t0 = time.perf_counter()
    pid = mount(cmd)
    mount_s = time.perf_counter() - t0
    try:
        root = os.path.join(args.mnt, "features", "resnet50", "layer12", "train")
        ds = torchvision.datasets.DatasetFolder(root, loader=np.load, extensions=(".npy",))
        dl = loader(ds, args)
        setup = time.perf_counter() - t0

        def snap(e):
            s = read_stats(args.mnt)
            x, t = s.get("extraction", {}), s.get("fs", {})
            # Running totals after epoch e: FUSE reads of feature files (a
            # later epoch's are pages the kernel's page cache lacked), the
            # ones answered from part of a cached feature, cache
            # decompression, prefetch's extractions, the mount's CPU.
            return {"mean_batch_size": x.get("mean_batch_size"), "batches": x.get("batches"),
                    "extractions": x.get("completed"), "cache_hit_ratio": s.get("cache_hit_ratio"),
                    "fuse_reads": t.get("reads"), "cache_partial_reads": t.get("cache_partial_reads"),
                    "decompress_seconds": s.get("cache", {}).get("decompress_seconds"),
                    "prefetch_extracted": s.get("prefetch", {}).get("extracted"),
                    "mount_cpu_seconds": s.get("cpu_seconds")}

        epochs = train(dl, len(ds.classes), args.epochs, lambda x: x, on_epoch=snap)
        stats = read_stats(args.mnt)
    finally:
        unmount(args.mnt, pid)
    json.dump({"mount_seconds": mount_s, "setup_seconds": setup, "epochs": epochs, "samples": len(ds),
               "classes": ds.classes, "prefetch": args.prefetch, "stats": stats,
               "load_start": load0, "load_end": loadavg()}, sys.stdout)


KINDS = ("baseline", "tree", "off")
TARGETS = {"epoch1": 1.6, "total": 4.5, "prefetch": 2}  # issue 11; prefetch unchanged


def cmd_report(args):
    rounds, orders = [], []
    for spec in args.round:
        r = {}
        for kv in spec:
            kind, path = kv.split("=", 1)
            with open(path) as f:
                r[kind] = json.load(f)
        if sorted(r) != sorted(KINDS):
            sys.exit(f"report: --round {' '.join(spec)}: want one each of {', '.join(KINDS)}")
        rounds.append(r)
        orders.append([kv.split("=", 1)[0] for kv in spec])
    nr = len(rounds)
    n = rounds[0]["baseline"]["samples"]
    for i, r in enumerate(rounds):
        for kind in KINDS:
            if r[kind]["samples"] != n:
                sys.exit(f"report: round {i + 1} {kind} read {r[kind]['samples']} samples, round 1 baseline {n}")

    def e1(r):  # epoch 1 from a standing start: setup (model / mount, listing) + first pass
        return r["setup_seconds"] + r["epochs"][0]["seconds"]

    def total(r):
        return r["setup_seconds"] + sum(e["seconds"] for e in r["epochs"])

    def per(kind, f):  # f over the rounds' runs of one kind, in round order
        return [f(r[kind]) for r in rounds]

    def ratio(num, den, f):  # within each round, then over the rounds
        return [f(r[num]) / f(r[den]) for r in rounds]

    def verdict(rs, target):
        v = ("met" if med(rs) >= target else "MISSED") if nr >= 3 else f"no verdict from {nr} round{'s' * (nr > 1)}, fewer than 3"
        return f"**{med(rs):.2f}x** (target >= {target}x: {v})"

    def ratio_row(name, rs, target, alone=None):
        return (f"| {name} | {verdict(rs, target)} | {span(rs, 'x')} | {', '.join(f'{x:.2f}' for x in rs)} | "
                + (f"{med(alone):.2f}x ({span(alone, 'x')})" if alone else "") + " |")

    def pass1(r):
        return r["epochs"][0]["seconds"]

    n_ep = len(rounds[0]["baseline"]["epochs"])
    rows = []
    for kind, name in (("baseline", "PyTorch alone: boto3 + torchvision + ResNet-50 to layer12 every epoch (baseline)"),
                       ("tree", "featurefs, `--prefetch tree`"), ("off", "featurefs, `--prefetch off`")):
        figs = ([per(kind, lambda r: r["setup_seconds"])]
                + [per(kind, lambda r, i=i: r["epochs"][i]["seconds"]) for i in range(n_ep)]
                + [per(kind, e1), per(kind, total)])
        loss = per(kind, lambda r: r["epochs"][-1]["loss"])
        load = ", ".join(f"{r[kind]['load_start']:.1f}/{r[kind]['load_end']:.1f}" for r in rounds)
        rows.append(f"| {name} | " + " | ".join(cell(x) for x in figs) + f" | {med(loss):.4f} | {load} |")
    epoch_cols = " | ".join(["epoch 1 pass s"] + [f"epoch {i + 1} s" for i in range(1, n_ep)])

    r1 = ratio("baseline", "tree", e1)
    rt = ratio("baseline", "tree", total)
    rp = ratio("off", "tree", e1)
    t1, tt, tp = TARGETS["epoch1"], TARGETS["total"], TARGETS["prefetch"]
    rotation = "; ".join(f"round {i + 1}: {', '.join(o)}" for i, o in enumerate(orders[:3]))
    if nr > 3:
        rotation += "; and so on"

    def mount_s(kind):  # `featurefs mount` itself, seconds
        xs = per(kind, lambda r: r["mount_seconds"])
        return f"{med(xs):.2f}s ({span(xs)})"

    def st(r):
        return r["stats"]

    def mbs(r):
        return r["epochs"][0].get("mean_batch_size") or 0

    stat_rows = []
    for i, r in enumerate(rounds):
        t, o = st(r["tree"]), st(r["off"])
        stat_rows.append(
            f"| {i + 1} | {', '.join(orders[i])} | {mbs(r['tree']):.2f} ({r['tree']['epochs'][0].get('batches')}) / "
            f"{mbs(r['off']):.2f} ({r['off']['epochs'][0].get('batches')}) | "
            f"{t.get('cache_hit_ratio', 0):.2f} / {o.get('cache_hit_ratio', 0):.2f} | "
            f"{t['extraction']['completed']} ({t.get('prefetch', {}).get('extracted', 'n/a')}) / "
            f"{o['extraction']['completed']} | {t['store']['bytes_fetched']:,} / {o['store']['bytes_fetched']:,} | "
            f"{t['extractor']['infer_seconds']:.1f} / {o['extractor']['infer_seconds']:.1f} |")
    devices = sorted({st(r[k])["device"] for r in rounds for k in ("tree", "off")})

    def during(kind, i, key):  # a running total's change over epoch i (0-based, i >= 1); None if not recorded
        vals = [(r[kind]["epochs"][i].get(key), r[kind]["epochs"][i - 1].get(key)) for r in rounds]
        if any(a is None or b is None for a, b in vals):
            return None
        return med([a - b for a, b in vals])

    def pair(key, fmt="{:.0f}"):
        return lambda i: " / ".join("n/a" if (v := during(k, i, key)) is None else fmt.format(v) for k in ("tree", "off"))

    later_rows = []
    for i in range(1, n_ep):
        rs = ratio("off", "tree", lambda r, i=i: r["epochs"][i]["seconds"])
        pf = during("tree", i, "prefetch_extracted")
        later_rows.append(f"| {i + 1} | {med(rs):.2f}x ({span(rs, 'x')}) | {', '.join(f'{x:.2f}' for x in rs)} | "
                          f"{pair('fuse_reads')(i)} | {pair('cache_partial_reads')(i)} | "
                          f"{'n/a' if pf is None else f'{pf:.0f}'} | {pair('mount_cpu_seconds', '{:.2f}')(i)} |")

    print(f"""## Epochs: transfer learning on layer12, PyTorch alone vs featurefs

{n} generated JPEGs ({args.classes} classes, {args.image_desc}) in a local MinIO bucket; ResNet-50 (torchvision, random seeded
weights, the same in both) frozen up to layer12 (layer3[3], 1024x14x14), global average pool, linear head (BatchNorm1d without
parameters + Linear) trained with SGD (lr 0.01, momentum 0.9), batch 32, `DataLoader(num_workers=4, shuffle=True)`, torch threads 2, ONNX Runtime
intra-op threads = {args.cpus} (the CPU count), same seed for the head and the shuffle order, {n_ep} epochs each.
Baseline: an ImageFolder-like Dataset that GETs each JPEG with boto3 and applies the torchvision transforms in the
workers, the trunk run in torch on every batch of every epoch. featurefs: `featurefs mount s3://BUCKET --endpoint-url ...`
(a fresh mount with a fresh cache directory per run), `DatasetFolder(MOUNT/features/resnet50/layer12/train, loader=np.load, extensions=(".npy",))`.
{nr} interleaved rounds in this one run, each running the three, the order rotating every round ({rotation}).
Figures: the median over the rounds with (min-max). Ratios: computed within each round (baseline and featurefs of the
same round), then their median with min-max; verdicts come from those medians, "featurefs" being the `--prefetch tree`
mount (the default).
Setup = model build + bucket listing (baseline) or mount + directory scan (featurefs; `featurefs mount` itself took
{mount_s('tree')} (tree) and {mount_s('off')} (off)); epoch 1 = setup + first pass.

| run | setup s | {epoch_cols} | epoch 1 incl. setup s | total s | final loss | load average (1 min) at start/end, by round |
|---|---:|{'---:|' * n_ep}---:|---:|---:|---|
{chr(10).join(rows)}

| target | median of per-round ratios | min-max | by round | first pass alone, median (min-max) |
|---|---|---:|---|---|
{ratio_row("featurefs epoch 1 vs baseline epoch 1 (incl. setup)", r1, t1, ratio("baseline", "tree", pass1))}
{ratio_row(f"total of {n_ep} epochs, baseline / featurefs", rt, tt)}
{ratio_row("epoch 1, `--prefetch off` / `--prefetch tree` (incl. setup)", rp, tp, ratio("off", "tree", pass1))}

Epochs 2-{n_ep} through the mount, defaults vs `--prefetch off` (per-round ratios of the epoch's seconds, then their
median; below 1.00x the defaults were slower), and what the mount did in them (the stats file's running totals read after
each epoch, medians over the rounds, tree / off): FUSE reads of feature files are the requests for pages the kernel's
page cache no longer held (0: the epoch came from the page cache alone).

| epoch | `--prefetch off` / `--prefetch tree`, seconds | by round | FUSE reads tree / off | from part of a cached feature tree / off | prefetch extractions (tree) | mount CPU s tree / off |
|---|---|---|---|---|---|---|
{chr(10).join(later_rows)}

featurefs's own figures, by round (stats file; mean batch size = `extraction.mean_batch_size` after epoch 1, with the
batch count; the rest after {n_ep} epochs; extractions for tree with what prefetch extracted in brackets); device
{", ".join(devices)}. The cache hit ratio does not see epochs 2-3, which the kernel's page cache serves.

| round | order | mean batch size tree / off | cache hit ratio tree / off | extractions tree / off | bytes fetched from the store tree / off | inference s (summed) tree / off |
|---|---|---|---|---|---|---|
{chr(10).join(stat_rows)}
""")
    # Why a target misses, from the medians of this run's rounds (none
    # without a verdict).
    notes = []
    infer = lambda r: st(r)["extractor"]["infer_seconds"]
    ms = lambda r: 1000 * infer(r) / max(st(r)["extraction"]["completed"], 1)
    busy = lambda r: infer(r) / max(pass1(r), 1e-9)
    m = lambda kind, f: med(per(kind, f))
    if med(rp) < tp:
        notes.append(
            f"- Prefetch: {med(rp):.2f}x, short of {tp}x. Here the model runs on {args.cpus} shared CPU cores: inference "
            f"took {m('off', infer):.1f}s of the {m('off', pass1):.1f}s first pass with `--prefetch off` "
            f"({100 * m('off', busy):.0f}%) and {m('tree', infer):.1f}s of {m('tree', pass1):.1f}s with `tree` "
            f"({100 * m('tree', busy):.0f}%) (medians over the rounds). Extraction is compute-bound, "
            "and the four DataLoader workers already keep it busy without prefetch (the extractor overlaps fetch and "
            "decode with inference either way), so prefetch can only win the time before the first reads arrive "
            "(DataLoader start-up) and the CPU the reads' own round trips cost. Batching does not help on the CPU "
            f"either: inference per image was {m('tree', ms):.0f} ms at mean batch {m('tree', mbs):.2f} (tree) vs "
            f"{m('off', ms):.0f} ms at mean batch {m('off', mbs):.2f} (off). Prefetch pays where the model has "
            "headroom: a GPU, where a full queue becomes large batches, or a remote store with per-request latency.")
    if med(r1) < t1:
        notes.append(f"- Epoch 1: {med(r1):.2f}x, short of {t1}x.")
    if med(rt) < tt:
        notes.append(
            f"- Total: {med(rt):.2f}x, short of {tt}x. featurefs's total is dominated by its epoch 1 "
            f"(median {m('tree', e1):.1f}s of {m('tree', total):.1f}s, mount included); the ratio tends to {n_ep}x the "
            "epoch-1 ratio as the image count grows, and epochs 2-3 here also carry the noise of a shared machine.")
    if notes and nr >= 3:
        print("\n".join(notes))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("upload")
    up.add_argument("--endpoint", required=True)
    up.add_argument("--bucket", required=True)
    up.add_argument("--dir", required=True)
    for name in ("baseline", "featurefs"):
        p = sub.add_parser(name)
        p.add_argument("--endpoint", required=True)
        p.add_argument("--bucket", required=True)
        p.add_argument("--epochs", type=int, default=3)
        p.add_argument("--workers", type=int, default=4)
        p.add_argument("--threads", type=int, default=2)
        p.add_argument("--batch", type=int, default=32)
    ff = sub.choices["featurefs"]
    ff.add_argument("--bin", required=True)
    ff.add_argument("--model", required=True)
    ff.add_argument("--mnt", required=True)
    ff.add_argument("--cache-dir", required=True)
    ff.add_argument("--log", required=True)
    ff.add_argument("--prefetch", required=True)
    ff.add_argument("--device", default="auto")
    ff.add_argument("--extra", default="", help="more mount flags, shell-quoted (scripts/bench-featurestore.sh)")
    rp = sub.add_parser("report")
    rp.add_argument("--round", action="append", nargs="+", required=True, metavar="KIND=JSON",
                    help="one interleaved round: baseline=, tree= and off= JSON files, in the order they ran")
    rp.add_argument("--classes", type=int, default=4)
    rp.add_argument("--image-desc", default="")
    rp.add_argument("--cpus", type=int, default=os.cpu_count())
    args = ap.parse_args()
    {"upload": cmd_upload, "baseline": cmd_baseline, "featurefs": cmd_featurefs, "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    main()
