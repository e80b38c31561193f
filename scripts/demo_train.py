#!/usr/bin/python3
"""featurefs demo: train a linear head on features served by a mount.

    /usr/bin/python3 scripts/demo_train.py MOUNT [--model resnet50] [--layer layer12] [--epochs 3]

Reads MOUNT/features/MODEL/LAYER/{train,val} with an unmodified
torchvision.datasets.DatasetFolder(root, loader=np.load, extensions=(".npy",))
and DataLoader(num_workers=4, shuffle=True). Epoch 1 makes the mount run the
model on every image; later epochs read from its cache. Prints a summary and
exits non-zero if anything is off (missing samples, wrong shapes, NaNs).
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

# On small machines PyTorch warns that 4 workers exceed the CPU count; 4 is the point.
warnings.filterwarnings("ignore", message="This DataLoader will create")


def loader(root, workers, shuffle):
    ds = torchvision.datasets.DatasetFolder(root, loader=np.load, extensions=(".npy",))
    dl = torch.utils.data.DataLoader(ds, batch_size=16, shuffle=shuffle, num_workers=workers)
    return ds, dl


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mount")
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--layer", default="layer12")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args()
    torch.manual_seed(0)

    base = os.path.join(args.mount, "features", args.model, args.layer)
    train_ds, train_dl = loader(os.path.join(base, "train"), args.workers, True)
    val_ds, val_dl = loader(os.path.join(base, "val"), args.workers, False)
    sample, _ = train_ds[0]
    if sample.dtype != np.float32 or sample.ndim < 1:
        print(f"demo: unexpected sample {sample.dtype} {sample.shape}", file=sys.stderr)
        return 1
    channels = sample.shape[0]
    head = torch.nn.Sequential(
        torch.nn.AdaptiveAvgPool2d(1) if sample.ndim == 3 else torch.nn.Identity(),
        torch.nn.Flatten(),
        torch.nn.BatchNorm1d(channels),
        torch.nn.Linear(channels, len(train_ds.classes)),
    )
    opt = torch.optim.Adam(head.parameters(), lr=1e-2)
    loss_fn = torch.nn.CrossEntropyLoss()

    epochs = []
    for epoch in range(1, args.epochs + 1):
        head.train()
        t0 = time.perf_counter()
        n = nbytes = 0
        total_loss = 0.0
        for x, y in train_dl:
            if not torch.isfinite(x).all():
                print("demo: non-finite feature values", file=sys.stderr)
                return 1
            opt.zero_grad()
            loss = loss_fn(head(x), y)
            loss.backward()
            opt.step()
            total_loss += loss.item() * len(y)
            n += len(y)
            nbytes += x.numel() * x.element_size()
        dt = time.perf_counter() - t0
        if n != len(train_ds):
            print(f"demo: epoch {epoch} read {n} samples, dataset has {len(train_ds)}", file=sys.stderr)
            return 1
        epochs.append((dt, n, nbytes, total_loss / n))
        print(f"  epoch {epoch}: {n} samples in {dt:6.2f} s  ({n / dt:7.1f} samples/s, "
              f"{nbytes / dt / 2**20:7.1f} MB/s)  train loss {total_loss / n:.3f}"
              + ("   <- features extracted by the mount" if epoch == 1 else "   <- from the cache"))

    head.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in val_dl:
            correct += (head(x).argmax(1) == y).sum().item()
            total += len(y)

    stats_path = os.path.join(args.mount, ".featurefs", "stats")
    try:
        with open(stats_path) as f:
            stats = json.load(f)
    except (OSError, ValueError) as e:
        stats = {"error": str(e)}

    print()
    print("featurefs demo summary")
    print(f"  features        {base}")
    print(f"  classes         {len(train_ds.classes)}: {', '.join(train_ds.classes)}")
    print(f"  samples         {len(train_ds)} train, {len(val_ds)} val")
    print(f"  sample          {sample.dtype} {'x'.join(map(str, sample.shape))} "
          f"({sample.nbytes} bytes)")
    if len(epochs) > 1:
        print(f"  epoch 1         {epochs[0][0]:.2f} s (extraction)")
        print(f"  epoch 2         {epochs[1][0]:.2f} s (cache): {epochs[0][0] / epochs[1][0]:.1f}x faster")
    print(f"  val accuracy    {correct}/{total} (random weights, synthetic images: not meaningful)")
    fs, cache, ex = stats.get("fs", {}), stats.get("cache", {}), stats.get("extractor", {})
    print(f"  mount           device {stats.get('device', '?')}: {fs.get('extractions', '?')} extractions "
          f"({ex.get('batches', '?')} model runs, {ex.get('infer_seconds', 0):.1f} s inference), "
          f"{fs.get('cache_hits', '?')} feature-cache hits, {fs.get('read_bytes', 0) / 2**20:.0f} MiB read "
          f"through FUSE; cache holds {cache.get('entries', '?')} features, "
          f"{cache.get('bytes', 0) / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
