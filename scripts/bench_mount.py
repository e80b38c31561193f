#!/usr/bin/python3
"""Second-epoch DataLoader throughput through a featurefs mount vs the same
.npy files on local disk (scripts/bench-mount.sh runs it).

    /usr/bin/python3 scripts/bench_mount.py --mount ROOT --local ROOT
        [--local-written ROOT] [--baseline NAME=ROOT] [--stats NAME=FILE ...]
        [--repeats 7] [--workers 4] [--batch 32] [--epoch1 JSON] [--restart JSON]
        [--ttl TEXT] [--env TEXT] | --warm --mount ROOT

All ROOTs hold the same DatasetFolder tree. For each, an unmodified
DatasetFolder(root, loader=np.load, extensions=(".npy",)) and a
DataLoader(num_workers=W, shuffle=True) are built once; then --repeats
rounds run one epoch of each, the order rotating each round. The table shows
median epoch times with min-max, and each source's median per-round ratio to
--local: the .npy copies whose page cache was filled by reading them, as a
dataset on disk is after its first epoch. --local-written is the same copy
with the pages `cp` wrote (large folios on ext4; reads of a FUSE file get
4 KiB ones), --baseline another featurefs build. With --stats (the mount's
.featurefs/stats of the source NAME), the lookups, opens and reads its epochs cost
are shown; --env is what else the text should say of the setup (a GPU, the
baseline's binary). Prints one markdown section on stdout.
"""
import argparse
import json
import os
import sys
import time
import warnings

import numpy as np
import torch
import torchvision

from benchlib import med

warnings.filterwarnings("ignore", message="This DataLoader will create")


def make_loader(root, workers, batch):
    """The dataset and loader a training script builds once, before its epochs."""
    t0 = time.perf_counter()
    ds = torchvision.datasets.DatasetFolder(root, loader=np.load, extensions=(".npy",))
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers)
    return ds, dl, time.perf_counter() - t0


def epoch(dl):
    """One pass over dl: seconds, samples, tensor bytes."""
    t0 = time.perf_counter()
    n = nbytes = 0
    for x, y in dl:
        n += len(y)
        nbytes += x.numel() * x.element_size()
    return time.perf_counter() - t0, n, nbytes


def file_bytes(ds):
    return sum(os.path.getsize(p) for p, _ in ds.samples)


def per_file_costs(paths):
    """Microseconds per file, one thread, page-cached: os.open+os.close,
    isatty (the ioctl Python's open() makes), open().read() and np.load."""
    def each(fn):
        t0 = time.perf_counter()
        for p in paths:
            fn(p)
        return (time.perf_counter() - t0) / len(paths) * 1e6

    def oc(p):
        os.close(os.open(p, os.O_RDONLY))

    def tty(p):
        fd = os.open(p, os.O_RDONLY)
        os.isatty(fd)
        os.close(fd)

    def rd(p):
        with open(p, "rb") as f:
            f.read()

    return {"open+close": each(oc), "isatty": each(tty) - each(oc), "open().read()": each(rd), "np.load": each(np.load)}


def tree_stats(path):
    with open(path) as f:
        fs = json.load(f)["fs"]
    return fs["lookups"], fs["opens"], fs["reads"], fs.get("cache_partial_reads", 0)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mount", required=True)
    ap.add_argument("--local", help="the local copy's ROOT (required unless --warm)")
    ap.add_argument("--local-written")
    ap.add_argument("--baseline", help="NAME=ROOT of another featurefs build's mount")
    ap.add_argument("--stats", action="append", default=[],
                    help="NAME=FILE: a source's .featurefs/stats (repeatable)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--epoch1", help="JSON from --warm: the extraction epoch")
    ap.add_argument("--restart", help="JSON from --warm: the first epoch of a restarted mount")
    ap.add_argument("--ttl", default="", help="the mount's --metadata-ttl, for the text")
    ap.add_argument("--warm", action="store_true", help="run one epoch over --mount, print JSON")
    ap.add_argument("--env", default="", help="the setup the harness's stamp does not record")
    args = ap.parse_args()
    if not args.warm and not args.local:
        ap.error("--local is required")
    torch.manual_seed(0)

    if args.warm:
        ds, dl, _ = make_loader(args.mount, args.workers, args.batch)
        dt, n, nbytes = epoch(dl)
        json.dump({"seconds": dt, "samples": n, "bytes": file_bytes(ds)}, sys.stdout)
        return 0

    sources = [("mount", args.mount), ("local", args.local)]
    if args.local_written:
        sources.append(("local-written", args.local_written))
    base_name = None
    if args.baseline:
        base_name, root = args.baseline.split("=", 1)
        sources.append((base_name, root))
    loaders, scan = {}, {}
    for name, root in sources:
        ds, dl, scan[name] = make_loader(root, args.workers, args.batch)
        loaders[name] = (ds, dl)
    ds = loaders["local"][0]
    n_samples = len(ds)
    fbytes = file_bytes(ds)
    for name, _ in sources:
        if len(loaders[name][0]) != n_samples or loaders[name][0].classes != ds.classes:
            print(f"bench: {name} and the local copy hold different datasets", file=sys.stderr)
            return 1
    stats = dict(s.split("=", 1) for s in args.stats)
    st0 = {name: tree_stats(path) for name, path in stats.items()}
    runs = {name: [] for name, _ in sources}
    for i in range(args.repeats):
        # Rotate which goes first, so none always follows another.
        k = i % len(sources)
        for name, _ in sources[k:] + sources[:k]:
            dt, n, nbytes = epoch(loaders[name][1])
            if n != n_samples:
                print(f"bench: {name} epoch read {n} samples, expected {n_samples}", file=sys.stderr)
                return 1
            runs[name].append(dt)
    st1 = {name: tree_stats(path) for name, path in stats.items()}
    # Per-file costs, one thread, 3 interleaved rounds over 64 files.
    costs = {name: [] for name, _ in sources}
    for i in range(3):
        k = i % len(sources)
        for name, _ in sources[k:] + sources[:k]:
            paths = [p for p, _ in loaders[name][0].samples[:64]]
            for p in paths:
                np.load(p)  # in the page cache
            costs[name].append(per_file_costs(paths))
    medians = {k: med(v) for k, v in runs.items()}

    def ratio(name):
        # The ratio within each round, then the median: load from other
        # processes that drifts during the run cancels within a round.
        rs = [l / m for l, m in zip(runs["local"], runs[name])]
        return med(rs), rs

    def row(label, name, note):
        v = runs[name]
        dt = medians[name]
        return (f"| {label} | {n_samples / dt:,.1f} | {fbytes / dt / 1e6:,.1f} | {dt:.3f} | "
                f"{min(v):.3f}-{max(v):.3f} | {note} |")

    sample_bytes = fbytes // max(n_samples, 1)
    first = np.load(ds.samples[0][0])
    shape = "x".join(map(str, first.shape))
    r_mount, rs_mount = ratio("mount")
    print("## Mount: second-epoch DataLoader throughput, featurefs vs local disk")
    print()
    print(f"{(args.env + '. ') if args.env else ''}ResNet-50 (torchvision, random weights) `layer12` features, {n_samples} samples of "
          f"{sample_bytes:,} bytes ({shape} {first.dtype} .npy), read by an unmodified "
          f"`DatasetFolder(root, loader=np.load, extensions=(\".npy\",))` with "
          f"`DataLoader(num_workers={args.workers}, batch_size={args.batch}, shuffle=True)`. "
          f"Each dataset and loader is built once, as a training script does; then {args.repeats} rounds "
          f"run one epoch of each source, the order rotating each round: median epoch times with min-max, "
          f"and the median of the per-round ratios to the local directory. "
          f"The local directory holds copies of the same .npy files whose pages were dropped and read "
          f"back once, as a dataset on disk is after its first epoch"
          + (" (the copy with the pages `cp` wrote, large folios on ext4, is shown too: reads of a FUSE file "
             "fill 4 KiB folios)" if args.local_written else "")
          + f"; the mount{(' (`--metadata-ttl ' + args.ttl + '`, shorter than an epoch, as with a large dataset)') if args.ttl else ''} "
          f"serves epoch 2+ from its feature cache and the kernel's page cache.")
    print()
    print("| source | samples/s | MB/s | epoch s, median | min-max | |")
    print("|---|---:|---:|---:|---:|---|")
    print(row("local directory (.npy copies, pages read back)", "local", "baseline"))
    print(row("featurefs mount, epoch 2+ (cache)", "mount", f"**{r_mount:.2f}x local** (target >= 0.9x)"))
    if args.local_written:
        print(row("local directory (.npy copies, pages as `cp` wrote them)", "local-written",
                  f"{ratio('local-written')[0]:.2f}x local"))
    if base_name:
        print(row(f"featurefs {base_name}, epoch 2+ (cache)", base_name, f"{ratio(base_name)[0]:.2f}x local"))
    for label, js, note in (
            ("featurefs mount, restarted: first epoch", args.restart,
             "features from the Badger cache through FUSE, no page cache"),
            ("featurefs mount, epoch 1 (extraction)", args.epoch1, "the model runs on every image")):
        if js:
            e = json.loads(js)
            print(f"| {label} | {e['samples'] / e['seconds']:,.1f} | "
                  f"{e['bytes'] / e['seconds'] / 1e6:,.1f} | {e['seconds']:.3f} | | {note} |")
    print()
    print(f"Per-round ratios local/mount: {', '.join(f'{x:.2f}' for x in rs_mount)}. Epoch seconds: "
          + "; ".join(f"{name} {', '.join(f'{x:.3f}' for x in runs[name])}" for name, _ in sources)
          + ". Building the DatasetFolder (directory scan): "
          + ", ".join(f"{name} {scan[name]:.3f} s" for name, _ in sources) + ".")
    if stats:
        print("FUSE requests per epoch of " + str(n_samples) + " files (the stats file's `fs.lookups`, "
              "`fs.opens`, `fs.reads` and `fs.cache_partial_reads` over the rounds; a read is a request for "
              "pages the kernel's page cache no longer held): " + "; ".join(
                  f"{name} {(st1[name][0] - st0[name][0]) / args.repeats:.1f} lookups, "
                  f"{(st1[name][1] - st0[name][1]) / args.repeats:.1f} opens, "
                  f"{(st1[name][2] - st0[name][2]) / args.repeats:.1f} reads "
                  f"({(st1[name][3] - st0[name][3]) / args.repeats:.1f} from part of a cached feature)"
                  for name in stats) + ".")
    print()
    print("Per file, one thread, every page cached (64 files, median of 3 interleaved rounds, microseconds): "
          "`isatty` is the ioctl Python's `open()` makes, a FUSE_IOCTL round trip on a FUSE file.")
    print()
    kinds = list(costs["local"][0])
    print("| source | " + " | ".join(kinds) + " |")
    print("|---|" + "---:|" * len(kinds))
    for name, _ in sources:
        print(f"| {name} | " + " | ".join(f"{med([c[k] for c in costs[name]]):.1f}" for k in kinds) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
