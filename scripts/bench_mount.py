#!/usr/bin/python3
"""Second-epoch DataLoader throughput through a featurefs mount vs the same
.npy files on local disk (scripts/bench-mount.sh runs it).

    /usr/bin/python3 scripts/bench_mount.py --mount ROOT --local ROOT
        [--repeats 7] [--workers 4] [--batch 32] [--epoch1 JSON] [--restart JSON] | --warm --mount ROOT

Both ROOTs hold the same DatasetFolder tree. For each, an unmodified
DatasetFolder(root, loader=np.load, extensions=(".npy",)) and a
DataLoader(num_workers=W, shuffle=True) are built once; epochs then alternate
between the two (which goes first alternates), and the median epoch times and
the median of the per-pair ratios are reported. Prints one markdown
section on stdout.
"""
import argparse
import json
import os
import statistics
import sys
import time
import warnings

import numpy as np
import torch
import torchvision

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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mount", required=True)
    ap.add_argument("--local", required=True)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--epoch1", help="JSON from --warm: the extraction epoch")
    ap.add_argument("--restart", help="JSON from --warm: the first epoch of a restarted mount")
    ap.add_argument("--warm", action="store_true", help="run one epoch over --mount, print JSON")
    ap.add_argument("--command", default="make bench")
    ap.add_argument("--env", default="")
    args = ap.parse_args()
    torch.manual_seed(0)

    if args.warm:
        ds, dl, _ = make_loader(args.mount, args.workers, args.batch)
        dt, n, nbytes = epoch(dl)
        json.dump({"seconds": dt, "samples": n, "bytes": file_bytes(ds)}, sys.stdout)
        return 0

    loaders, scan = {}, {}
    for name, root in (("mount", args.mount), ("local", args.local)):
        ds, dl, scan[name] = make_loader(root, args.workers, args.batch)
        loaders[name] = (ds, dl)
    n_samples = len(loaders["local"][0])
    fbytes = file_bytes(loaders["local"][0])
    ds = loaders["local"][0]
    if len(loaders["mount"][0]) != n_samples or loaders["mount"][0].classes != ds.classes:
        print("bench: the mount and the local copy hold different datasets", file=sys.stderr)
        return 1
    runs = {"mount": [], "local": []}
    for i in range(args.repeats):
        # Alternate which goes first, so neither always follows the other.
        for name in (("mount", "local") if i % 2 == 0 else ("local", "mount")):
            dt, n, nbytes = epoch(loaders[name][1])
            if n != n_samples:
                print(f"bench: {name} epoch read {n} samples, expected {n_samples}", file=sys.stderr)
                return 1
            runs[name].append(dt)
    med = {k: statistics.median(v) for k, v in runs.items()}
    # The ratio of each pair of neighbouring epochs, then the median: load
    # from other processes that drifts during the run cancels within a pair.
    pair_ratios = [l / m for l, m in zip(runs["local"], runs["mount"])]
    ratio = statistics.median(pair_ratios)

    def row(label, dt, note=""):
        return (f"| {label} | {n_samples / dt:,.1f} | {fbytes / dt / 1e6:,.1f} | {dt:.3f} | {note} |")

    sample_bytes = fbytes // max(n_samples, 1)
    first = np.load(ds.samples[0][0])
    shape = "x".join(map(str, first.shape))
    print("## Mount: second-epoch DataLoader throughput, featurefs vs local disk")
    print()
    print(f"Command: `{args.command}`{(' (' + args.env + ')') if args.env else ''}.")
    print(f"ResNet-50 (torchvision, random weights) `layer12` features, {n_samples} samples of "
          f"{sample_bytes:,} bytes ({shape} {first.dtype} .npy), read by an unmodified "
          f"`DatasetFolder(root, loader=np.load, extensions=(\".npy\",))` with "
          f"`DataLoader(num_workers={args.workers}, batch_size={args.batch}, shuffle=True)`. "
          f"Each dataset and loader is built once, as a training script does; its epochs then "
          f"alternate between the mount and the local directory, {args.repeats} pairs; the table "
          f"shows median epoch times and the median of the per-pair ratios. "
          f"The local directory holds copies of the same .npy files (both in the page cache); "
          f"the mount serves epoch 2+ from its feature cache and the kernel's page cache.")
    print()
    print("| source | samples/s | MB/s | epoch s | |")
    print("|---|---:|---:|---:|---|")
    print(row("local directory (.npy copies)", med["local"], "baseline"))
    print(row("featurefs mount, epoch 2+ (cache)", med["mount"],
              f"**{ratio:.2f}x local** (target >= 0.8x)"))
    for label, js, note in (
            ("featurefs mount, restarted: first epoch", args.restart,
             "features from the Badger cache through FUSE, no page cache"),
            ("featurefs mount, epoch 1 (extraction)", args.epoch1, "the model runs on every image")):
        if js:
            e = json.loads(js)
            print(f"| {label} | {e['samples'] / e['seconds']:,.1f} | "
                  f"{e['bytes'] / e['seconds'] / 1e6:,.1f} | {e['seconds']:.3f} | {note} |")
    print()
    print(f"Per-pair ratios local/mount: {', '.join(f'{x:.2f}' for x in pair_ratios)}. "
          f"Epoch seconds: mount {', '.join(f'{x:.3f}' for x in runs['mount'])}; "
          f"local {', '.join(f'{x:.3f}' for x in runs['local'])}. Building the DatasetFolder "
          f"(directory scan): mount {scan['mount']:.3f} s, local {scan['local']:.3f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
