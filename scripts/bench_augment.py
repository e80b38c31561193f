#!/usr/bin/python3
"""Augmented views (issue 41): what the first pass over K views costs, and an
epoch over a cached view tree vs the plain tree (scripts/bench-augment.sh runs it).

    /usr/bin/python3 scripts/bench_augment.py round --bin BIN --model M.onnx --src DIR --mnt DIR
        --cache-dir DIR --log FILE --views K --round R [--epochs 5] [--workers 4] [--batch 32]
    /usr/bin/python3 scripts/bench_augment.py report --round JSON ... [--image-desc ...]

One round, with the near-free tiny model of scripts/bench_delivery.py (layer0,
802,816 bytes a feature) over a local directory DIR of images:

1. First pass: a fresh `featurefs mount --augment K` (a fresh cache
   directory, the defaults otherwise: --prefetch tree) of DIR; in an order
   that rotates every round, "plain" reads MNT/features/tiny/layer0/train and
   "views" reads layer0-aug/0/train .. layer0-aug/K-1/train, each tree one
   epoch of an unmodified DatasetFolder(root, loader=np.load,
   extensions=(".npy",)) + DataLoader(shuffle=True): a training script's
   first K epochs over the views. The stats file (MOUNT/.featurefs/stats)
   before and after each gives the extractions: extractor.completed (images
   the model ran on), extractor.requests and .shared (requests joined to one
   already in flight: a read and prefetch asking at once), fs.extractions.
2. Remount: unmount (the mount writes what it queued for the cache and
   exits), drop the cache directory's pages from the page cache
   (fdatasync + POSIX_FADV_DONTNEED on every file in it: our own files only),
   mount the same cache again. A new mount's files have no pages in the
   kernel's page cache, so the first epoch of each tree reads every byte
   through FUSE from the feature cache on disk: "plain" and view k = R mod K,
   in an order that rotates every round; then the other K-1 view trees once
   each (plain reads), so that the remount's extractions cover all K+1 trees.
3. Page cache: --epochs more epochs of plain and view k, alternating (the
   order rotating), on that mount: their pages are in the kernel's page cache
   now (FUSE reads in the stats file: the pages it no longer held).
4. The views' first pass again on a fresh mount and cache with --prefetch
   off: the extractions are then the reads' alone.

Prints one JSON object per round on stdout; report prints one markdown
section (medians over the rounds with min-max; ratios computed within each
round, then their median; verdicts from the medians, with 3 rounds or more).
"""
import argparse
import json
import os
import shutil
import sys
import time
import warnings

import numpy as np
import torch
import torchvision

from benchlib import cell, drop_pages, loadavg, med, mount, proc_cpu, proc_read_bytes, read_stats, span, unmount

warnings.filterwarnings("ignore", message="This DataLoader will create")

LAYER = "layer0"
# Targets (issue 41): the first pass costs K x images extractions (ratio 1,
# no more), a remount none; an epoch over a cached view tree >= 0.9x the
# plain tree's images/s in the same run.
TARGET_EPOCH = 0.9


def mount_views(args, cache_dir=None, more=()):
    """`featurefs mount --augment K` of args.src; the serving pid once mounted."""
    return mount([args.bin, "mount", "--model", f"tiny={args.model}", "--cache-dir", cache_dir or args.cache_dir,
                  "--log-file", args.log, "--device", "cpu", "--augment", str(args.views),
                  "--augment-seed", "0", *more, args.src, args.mnt], args.mnt)


def snapshot(mnt, pid):
    """The figures of the stats file a phase's before/after needs, and the
    mount process's CPU seconds."""
    s = read_stats(mnt)
    x, f = s["extractor"], s["fs"]
    return {"completed": x["completed"], "requests": x["requests"], "shared": x["shared"],
            "failed": x["failed"], "fs_extractions": f["extractions"], "fs_reads": f["reads"],
            "cache_hits": f["cache_hits"], "cache_partial_reads": f["cache_partial_reads"],
            "skipped_writes": f.get("cache_writes_skipped", 0), "io_errors": f["io_errors"],
            "decode_seconds": x["decode_seconds"], "infer_seconds": x["infer_seconds"],
            "prefetch_extracted": s.get("prefetch", {}).get("extracted", 0), "mount_cpu": proc_cpu(pid), "disk_read": proc_read_bytes(pid)}


def epoch(root, workers, batch, seed):
    """One epoch of an unmodified DatasetFolder + DataLoader over root:
    (scan seconds, epoch seconds, samples, tensor bytes)."""
    t0 = time.perf_counter()
    ds = torchvision.datasets.DatasetFolder(root, loader=np.load, extensions=(".npy",))
    g = torch.Generator().manual_seed(seed)
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers, generator=g)
    t1 = time.perf_counter()
    n = nbytes = 0
    for x, y in dl:
        n += len(y)
        nbytes += x.numel() * x.element_size()
    return t1 - t0, time.perf_counter() - t1, n, nbytes


def phase(args, pid, trees, label):
    """Epochs over trees (paths under the model's directory), with the stats
    before and after."""
    load0, before = loadavg(), snapshot(args.mnt, pid)
    runs = []
    for i, t in enumerate(trees):
        scan, secs, n, nbytes = epoch(os.path.join(args.mnt, "features", "tiny", t), args.workers, args.batch,
                                      args.round * 100 + i)
        runs.append({"tree": t, "scan_seconds": scan, "seconds": secs, "samples": n, "bytes": nbytes})
    after = snapshot(args.mnt, pid)
    secs = sum(r["seconds"] for r in runs)
    print(f"  round {args.round} {label}: {secs:.2f}s over {len(trees)} tree(s), "
          f"{after['completed'] - before['completed']} extractions, {after['fs_reads'] - before['fs_reads']} FUSE reads",
          file=sys.stderr)
    return {"label": label, "runs": runs, "before": before, "after": after, "load_start": load0, "load_end": loadavg()}


def rotated(items, r):
    k = r % len(items)
    return items[k:] + items[:k]


def cmd_round(args):
    K, r = args.views, args.round
    plain = f"{LAYER}/train"
    views = [f"{LAYER}-aug/{k}/train" for k in range(K)]
    view = views[(r - 1) % K]
    out = {"round": r, "views": K, "view": (r - 1) % K, "load_start": loadavg()}
    # 1. First pass on a fresh mount and cache.
    pid = mount_views(args)
    try:
        order = rotated(["plain", "views"], r - 1)
        out["first_order"] = order
        out["first"] = {kind: phase(args, pid, [plain] if kind == "plain" else views, f"first pass, {kind}")
                        for kind in order}
    finally:
        unmount(args.mnt, pid)
    # 2. Remount on the same cache, its pages dropped (our cache directory's
    # files only).
    out["dropped_files"] = drop_pages(args.cache_dir)
    pid = mount_views(args)
    try:
        order = rotated(["plain", "view"], r - 1)
        out["cached_order"] = order
        out["cached"] = {kind: phase(args, pid, [plain] if kind == "plain" else [view], f"from the cache, {kind}")
                         for kind in order}
        out["rest"] = phase(args, pid, [v for v in views if v != view], "from the cache, the other views")
        # 3. Page cache.
        out["page"] = []
        for e in range(args.epochs):
            order = rotated(["plain", "view"], r - 1 + e)
            out["page"].append({kind: phase(args, pid, [plain] if kind == "plain" else [view],
                                            f"page cache {e + 1}, {kind}") for kind in order})
    finally:
        unmount(args.mnt, pid)
    # 4. The first pass over the views again, --prefetch off: a fresh mount
    # and cache directory; every extraction is a read's.
    off_cache = args.cache_dir + "-off"
    pid = mount_views(args, off_cache, ("--prefetch", "off"))
    try:
        out["views_off"] = phase(args, pid, views, "first pass, views, --prefetch off")
    finally:
        unmount(args.mnt, pid)
        shutil.rmtree(off_cache, ignore_errors=True)
    out["load_end"] = loadavg()
    json.dump(out, sys.stdout)


# --- report ---

def d(p, key):
    return p["after"][key] - p["before"][key]


def secs(p):
    return sum(r["seconds"] for r in p["runs"])


def samples(p):
    return sum(r["samples"] for r in p["runs"])


def cmd_report(args):
    rounds = []
    for path in args.round:
        with open(path) as f:
            rounds.append(json.load(f))
    nr = len(rounds)
    K = rounds[0]["views"]
    n = samples(rounds[0]["first"]["plain"])
    for r in rounds:
        for p in [*r["first"].values(), r["views_off"], *r["cached"].values(), r["rest"], *(x for e in r["page"] for x in e.values())]:
            for run in p["runs"]:
                if run["samples"] != n or run["bytes"] != n * 802816:
                    sys.exit(f"report: round {r['round']} {p['label']} {run['tree']}: {run['samples']} samples, "
                             f"{run['bytes']} bytes; want {n}, {n * 802816}")

    def per(f):
        return [f(r) for r in rounds]

    def verdict(ok):
        return ("met" if ok else "MISSED") if nr >= 3 else "no verdict: fewer than 3 rounds"

    fv, fp, fo = (lambda r: r["first"]["views"]), (lambda r: r["first"]["plain"]), (lambda r: r["views_off"])
    x_views = per(lambda r: d(fv(r), "completed"))
    x_plain = per(lambda r: d(fp(r), "completed"))
    x_ratio = [x / (K * n) for x in x_views]
    req_views = per(lambda r: d(fv(r), "requests"))
    shared_views = per(lambda r: d(fv(r), "shared"))
    fsx_views = per(lambda r: d(fv(r), "fs_extractions"))
    failed = per(lambda r: d(fv(r), "failed") + d(fp(r), "failed") + d(fo(r), "failed"))
    skipped = per(lambda r: r["first"][r["first_order"][-1]]["after"]["skipped_writes"])
    x_off = per(lambda r: d(fo(r), "completed"))
    ms_off = per(lambda r: 1000 * secs(fo(r)) / (K * n))
    off_ok = all(x == K * n for x in x_off)
    remount_phases = lambda r: [*r["cached"].values(), r["rest"], *(x for e in r["page"] for x in e.values())]
    x_remount = per(lambda r: sum(d(p, "completed") for p in remount_phases(r)))
    io_errors = per(lambda r: sum(d(p, "io_errors") for p in [*r["first"].values(), fo(r), *remount_phases(r)]))

    ms_view = per(lambda r: 1000 * secs(fv(r)) / (K * n))
    ms_plain = per(lambda r: 1000 * secs(fp(r)) / n)
    first_ratio = per(lambda r: (secs(fv(r)) / (K * n)) / (secs(fp(r)) / n))
    cpu_view = per(lambda r: 1000 * d(fv(r), "mount_cpu") / (K * n))
    cpu_plain = per(lambda r: 1000 * d(fp(r), "mount_cpu") / n)
    dec_view = per(lambda r: 1000 * d(fv(r), "decode_seconds") / max(d(fv(r), "completed"), 1))
    dec_plain = per(lambda r: 1000 * d(fp(r), "decode_seconds") / max(d(fp(r), "completed"), 1))
    inf_view = per(lambda r: 1000 * d(fv(r), "infer_seconds") / max(d(fv(r), "completed"), 1))
    inf_plain = per(lambda r: 1000 * d(fp(r), "infer_seconds") / max(d(fp(r), "completed"), 1))

    c_plain = per(lambda r: n / secs(r["cached"]["plain"]))
    c_view = per(lambda r: n / secs(r["cached"]["view"]))
    c_ratio = per(lambda r: secs(r["cached"]["plain"]) / secs(r["cached"]["view"]))
    c_reads = per(lambda r: (d(r["cached"]["plain"], "fs_reads"), d(r["cached"]["view"], "fs_reads")))
    c_hits = per(lambda r: (d(r["cached"]["plain"], "cache_hits"), d(r["cached"]["view"], "cache_hits")))
    c_disk = per(lambda r: (d(r["cached"]["plain"], "disk_read") / 1e6, d(r["cached"]["view"], "disk_read") / 1e6))
    p_plain = per(lambda r: med([n / secs(e["plain"]) for e in r["page"]]))
    p_view = per(lambda r: med([n / secs(e["view"]) for e in r["page"]]))
    p_ratio = per(lambda r: med([secs(e["plain"]) for e in r["page"]]) / med([secs(e["view"]) for e in r["page"]]))
    p_reads = per(lambda r: (sum(d(e["plain"], "fs_reads") for e in r["page"]),
                             sum(d(e["view"], "fs_reads") for e in r["page"])))
    n_ep = len(rounds[0]["page"])
    mb = n * 802816 / 1e6

    x_ok = all(x == K * n for x in x_views)
    r_ok = all(x == 0 for x in x_remount)
    c_ok, p_ok = med(c_ratio) >= TARGET_EPOCH, med(p_ratio) >= TARGET_EPOCH
    by = lambda xs, fmt="{:.2f}": ", ".join(fmt.format(x) for x in xs)
    pair = lambda xs: ", ".join(f"{a} / {b}" for a, b in xs)

    print(f"""## Augmented views: the first pass over K views, and epochs over a cached view tree vs the plain tree

{n} generated images ({args.image_desc}) in a local directory, `featurefs mount --augment {K} --augment-seed 0 --device cpu
DIR MNT` (the defaults otherwise: `--prefetch tree`) with the near-free model of scripts/bench_delivery.py
(`tiny`: Conv2d(3, 64, 4, stride 4) + ReLU, layer0 = 64x56x56 float32, 802,816 bytes a feature, so the figures are
the mount's own: decode, crop and resize, the cache and FUSE, not a network's inference). Every epoch is an unmodified
`DatasetFolder(root, loader=np.load, extensions=(".npy",))` + `DataLoader(batch_size={args.batch}, shuffle=True,
num_workers={args.workers})` over `features/tiny/layer0/train` (plain) or `features/tiny/layer0-aug/k/train` (view k),
timed from iterating the DataLoader (its workers' start included, as in every epoch of a training script) to the
last batch, the DatasetFolder scan apart.
{nr} interleaved rounds in this one run; each round:
1. **First pass**: a fresh mount with a fresh cache directory; "plain" (one epoch of the plain tree) and "views"
   (one epoch of each view tree 0..{K - 1}, as a training script's first {K} epochs), in an order that rotates every
   round; the extractions are the stats file's (MNT/.featurefs/stats) `extractor.completed` (images the model ran
   on) before and after each.
2. **From the feature cache**: unmount, the cache directory's pages dropped from the page cache (fdatasync +
   `POSIX_FADV_DONTNEED` on each of its files: nothing else is dropped), the same cache mounted again; one epoch of
   plain and one of view k = round - 1 mod {K} (order rotating): a new mount's files have no pages in the kernel's
   page cache, so these epochs read every byte through FUSE from the feature cache on disk; then the other
   {K - 1} view trees once each, so that the remount's extraction count covers all {K + 1} trees.
3. **From the page cache**: {n_ep} more epochs each of plain and view k on that mount, alternating (order rotating):
   both trees' pages are in the kernel's page cache now.
4. **Views, `--prefetch off`**: the first pass over the {K} view trees again, on a fresh mount and cache directory
   with `--prefetch off`, where every extraction is a read's.
Figures: the median over the rounds with (min-max); ratios computed within each round, then their median with min-max;
verdicts from those medians ({nr} round(s){'' if nr >= 3 else ': fewer than 3, no verdicts'}).

| target | median of per-round figures | min-max | by round |
|---|---|---:|---|
| first pass over {K} views: extractions / ({K} x images) = 1.000, every round | **{med(x_ratio):.3f}** (target 1.000: {verdict(x_ok)}) | {min(x_ratio):.3f}-{max(x_ratio):.3f} | {by(x_ratio, "{:.3f}")} |
| extractions after a remount, all {K + 1} trees read = 0, every round | **{med(x_remount):.0f}** (target 0: {verdict(r_ok)}) | {min(x_remount)}-{max(x_remount)} | {by(x_remount, "{}")} |
| epoch over a cached view tree vs the plain tree, images/s, from the feature cache (remounted) | **{med(c_ratio):.2f}x** (target >= {TARGET_EPOCH}x: {verdict(c_ok)}) | {span(c_ratio, 'x')} | {by(c_ratio)} |
| epoch over a cached view tree vs the plain tree, images/s, from the page cache | **{med(p_ratio):.2f}x** (target >= {TARGET_EPOCH}x: {verdict(p_ok)}) | {span(p_ratio, 'x')} | {by(p_ratio)} |
| first pass, seconds per view-image vs per plain image | **{med(first_ratio):.2f}x** (no target) | {span(first_ratio, 'x')} | {by(first_ratio)} |

First pass ({K} x {n} = {K * n} view-images and {n} plain images a round):

| | plain (1 tree) | views ({K} trees) | views, `--prefetch off` |
|---|---:|---:|---:|
| extractions (`extractor.completed`) | {cell(x_plain, "{:.0f}")} | {cell(x_views, "{:.0f}")} | {cell(x_off, "{:.0f}")} |
| extractions by round | {by(x_plain, "{}")} | {by(x_views, "{}")} | {by(x_off, "{}")} |
| extraction requests (`extractor.requests`) / of them joined to one in flight (`shared`) / `fs.extractions` | | {cell(req_views, "{:.0f}")} / {cell(shared_views, "{:.0f}")} / {cell(fsx_views, "{:.0f}")} | |
| pass seconds | {cell(per(lambda r: secs(fp(r))))} | {cell(per(lambda r: secs(fv(r))))} | {cell(per(lambda r: secs(fo(r))))} |
| ms per image (views: per view-image) | {cell(ms_plain)} | {cell(ms_view)} | {cell(ms_off)} |
| mount process CPU ms per image | {cell(cpu_plain)} | {cell(cpu_view)} | |
| extractor decode + preprocess ms per image (summed over its threads) | {cell(dec_plain)} | {cell(dec_view)} | |
| extractor inference ms per image (summed) | {cell(inf_plain)} | {cell(inf_view)} | |

Failed extractions {sum(failed)}, EIO answers {sum(io_errors)}, features not written to the cache (queue full) {sum(skipped)}, all rounds.
Orders by round: {"; ".join(", ".join(r["first_order"]) for r in rounds)}.

Epochs over a cached tree, {n} images ({mb:.0f} MB) each (images/s):

| from | plain | view k | view / plain (per-round ratio) | by round | FUSE reads plain / view, by round | features read from the cache (`fs.cache_hits`) plain / view, by round | MB the mount read from disk plain / view, by round |
|---|---:|---:|---:|---|---|---|---|
| the feature cache (remounted, its pages dropped; 1 epoch each) | {cell(c_plain, "{:.0f}")} | {cell(c_view, "{:.0f}")} | **{med(c_ratio):.2f}x** ({span(c_ratio)}) | {by(c_ratio)} | {pair(c_reads)} | {pair(c_hits)} | {", ".join(f"{a:.0f} / {b:.0f}" for a, b in c_disk)} |
| the page cache (median of {n_ep} epochs each) | {cell(p_plain, "{:.0f}")} | {cell(p_view, "{:.0f}")} | **{med(p_ratio):.2f}x** ({span(p_ratio)}) | {by(p_ratio)} | {pair(p_reads)} | | |

View k by round: {by([r["view"] for r in rounds], "{}")}; orders (from the feature cache) by round: {"; ".join(", ".join(r["cached_order"]) for r in rounds)}.
FUSE reads are the READ requests the mount answered (the pages the kernel did not hold); 0 in an epoch means it came
from the page cache alone. MB read from disk: the mount process's /proc/PID/io `read_bytes` over the epoch (the
feature cache's files that the page cache did not hold: {mb:.0f} MB would be all of a tree). Load average (1 min) at each round's start/end: {", ".join(f"{r['load_start']:.1f}/{r['load_end']:.1f}" for r in rounds)}.""")
    notes = []
    if nr >= 3 and not x_ok:
        why = (f" With `--prefetch off` they were {by(x_off, '{}')}: exactly {K} x images in every round, so the excess is "
               "prefetch's: features extracted twice, by a read and by the tree's prefetch walk, one starting after "
               "the other had finished (requests in flight at once are joined: `shared`). Two windows were closed after "
               "3a2b8b1 (a walk looks at the cache again after waiting for room in its budget; a read takes a feature "
               "prefetch handed off and had not queued for the cache yet: fs/features TestPrefetchSkipsWhatAReaderComputedWhileItWaited, "
               "TestReadTakesAHandedOffFeature) and the excess stayed (the run at 3a2b8b1, before that change, had 1285 by median, 1285-1295); what is "
               "left, from the code, not traced: the extractor drops a finished call from its in-flight set before "
               "its requester's goroutine has queued the feature for the cache, and a request in between is not "
               "joined to it." if off_ok else "")
        notes.append(f"- Extractions: {by(x_views, '{}')} by round for {K} x {n} = {K * n} view-images, short of exactly "
                     f"{K * n} (the plain tree's: {by(x_plain, '{}')} for {n}).{why}")
    if nr >= 3 and not r_ok:
        notes.append(f"- Remount: {by(x_remount, '{}')} extractions by round, short of 0.")
    if nr >= 3 and not c_ok:
        notes.append(f"- From the feature cache: a view tree read at {med(c_ratio):.2f}x the plain tree's images/s, short of {TARGET_EPOCH}x.")
    if nr >= 3 and not p_ok:
        notes.append(f"- From the page cache: a view tree read at {med(p_ratio):.2f}x the plain tree's images/s, short of {TARGET_EPOCH}x.")
    if notes:
        print()
        print("\n".join(notes))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rd = sub.add_parser("round")
    for a in ("--bin", "--model", "--src", "--mnt", "--cache-dir", "--log"):
        rd.add_argument(a, required=True)
    rd.add_argument("--views", type=int, required=True)
    rd.add_argument("--round", type=int, required=True, help="1-based: sets the rotation and view k")
    rd.add_argument("--epochs", type=int, default=5, help="page-cache epochs of each tree")
    rd.add_argument("--workers", type=int, default=4)
    rd.add_argument("--batch", type=int, default=32)
    rp = sub.add_parser("report")
    rp.add_argument("--round", action="append", required=True, metavar="JSON")
    rp.add_argument("--image-desc", default="")
    rp.add_argument("--workers", type=int, default=4)
    rp.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    {"round": cmd_round, "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    main()
