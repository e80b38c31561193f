#!/usr/bin/python3
"""featurefs demo: train a linear head on features served by a mount.

    /usr/bin/python3 scripts/demo_train.py MOUNT [--model resnet50] [--layer layer12]
        [--epochs 4] [--augment K] [--workers 4]

Reads MOUNT/features/MODEL/LAYER/{train,val} with an unmodified
torchvision.datasets.DatasetFolder(root, loader=np.load, extensions=(".npy",))
and DataLoader(num_workers=4, shuffle=True). It first reads one val feature
and waits for the mount to finish (its first extraction measures the batch
size, once per mount); then epoch 1 makes the mount run the model on every
image and later epochs read from its cache.

With --augment K (the mount's --augment K) it then trains a second head, from
the same initial weights, on the augmented views: epoch e reads
LAYER-aug/{(e - 1) % K}/train, so each of the first K epochs computes a view
of every image and later ones read the cache; it runs one epoch more than
--epochs when that epoch's view was read before, to show a cached view's
speed. Both heads are scored on the plain val tree after every epoch.

Prints each epoch's time, the images the mount ran the model on and the bytes
it served during it (its .featurefs/stats), the loss and the val accuracy,
then a summary; exits non-zero if anything is off (missing samples, wrong shapes,
NaNs, a view equal to the plain feature or to another view).
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


class DemoError(Exception):
    pass


EXTRACTED = "extracted by the mount"
CACHED = "from the cache"


def loader(root, workers, shuffle):
    ds = torchvision.datasets.DatasetFolder(root, loader=np.load, extensions=(".npy",))
    dl = torch.utils.data.DataLoader(ds, batch_size=16, shuffle=shuffle, num_workers=workers)
    return ds, dl


def read_stats(mount):
    try:
        with open(os.path.join(mount, ".featurefs", "stats")) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return {"error": str(e)}


def count(stats, group, name):
    return stats.get(group, {}).get(name, 0)


def new_head(x, classes):
    """A head for batches like x, the same initial weights every time."""
    if x.dtype != torch.float32 or x.ndim < 2:
        raise DemoError(f"unexpected batch {x.dtype} {tuple(x.shape)}")
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.AdaptiveAvgPool2d(1) if x.ndim == 4 else torch.nn.Identity(),
            torch.nn.Flatten(),
            torch.nn.BatchNorm1d(x.shape[1]),
            torch.nn.Linear(x.shape[1], classes),
        )


def evaluate(head, val_dl):
    head.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in val_dl:
            correct += (head(x).argmax(1) == y).sum().item()
            total += len(y)
    return correct, total


def train(mount, roots, val_dl, classes, workers, notes):
    """Trains a new head one epoch per root (made on the first batch, so
    that no train feature is read before epoch 1's clock starts); returns
    a dict per epoch and the first batch's sample shape."""
    head = opt = shape = None
    loss_fn = torch.nn.CrossEntropyLoss()
    out = []
    for epoch, root in enumerate(roots, 1):
        before = read_stats(mount)
        t0 = time.perf_counter()
        ds, dl = loader(root, workers, True)  # a DatasetFolder per epoch: the views' recipe
        if ds.classes != classes:
            raise DemoError(f"{root}: classes {ds.classes}, want {classes}")
        n = nbytes = 0
        total_loss = 0.0
        for x, y in dl:
            if not torch.isfinite(x).all():
                raise DemoError(f"{root}: non-finite feature values")
            if head is None:
                head, shape = new_head(x, len(classes)), tuple(x.shape[1:])
                opt = torch.optim.Adam(head.parameters(), lr=1e-2)
            if tuple(x.shape[1:]) != shape:
                raise DemoError(f"{root}: a sample of shape {tuple(x.shape[1:])}, want {shape}")
            head.train()
            opt.zero_grad()
            loss = loss_fn(head(x), y)
            loss.backward()
            opt.step()
            total_loss += loss.item() * len(y)
            n += len(y)
            nbytes += x.numel() * x.element_size()
        dt = time.perf_counter() - t0
        after = read_stats(mount)
        if n != len(ds) or n == 0:
            raise DemoError(f"{root}: epoch {epoch} read {n} samples, dataset has {len(ds)}")
        correct, total = evaluate(head, val_dl)
        e = {"epoch": epoch, "seconds": dt, "samples": n, "bytes": nbytes, "loss": total_loss / n,
             # images the model ran on, bytes the mount served (the rest came
             # from the kernel's page cache)
             "computed": count(after, "extraction", "batched_items") - count(before, "extraction", "batched_items"),
             "fuse_bytes": count(after, "fs", "read_bytes") - count(before, "fs", "read_bytes"),
             "correct": correct, "total": total}
        out.append(e)
        fresh = notes[epoch - 1][1] != CACHED
        print(f"  epoch {epoch} {notes[epoch - 1][0]:<7} {dt:6.2f} s ({n / dt:5.1f} samples/s), "
              f"model ran on {e['computed']:3d} images, {e['fuse_bytes'] / 2**20:4.0f} MiB through FUSE; "
              f"loss {e['loss']:.3f}, val {correct}/{total}  <- {notes[epoch - 1][1]}", flush=True)
        if fresh and e["computed"] < n or not fresh and e["computed"]:
            raise DemoError(f"{root}: epoch {epoch} ran the model on {e['computed']} images, want "
                            + (f"at least {n}" if fresh else "none"))
    return out, shape


def check_views(plain_root, aug_base, k, ds):
    """A view's sample is not the plain feature, nor another view's."""
    rel = os.path.relpath(ds.samples[0][0], plain_root)
    plain = np.load(os.path.join(plain_root, rel))
    views = [np.load(os.path.join(aug_base, str(i), "train", rel)) for i in range(min(k, 2))]
    for i, v in enumerate(views):
        if v.shape != plain.shape or v.dtype != plain.dtype:
            raise DemoError(f"view {i} of {rel}: {v.dtype} {v.shape}, plain {plain.dtype} {plain.shape}")
        if np.array_equal(v, plain):
            raise DemoError(f"view {i} of {rel} equals the plain feature")
    if len(views) == 2 and np.array_equal(views[0], views[1]):
        raise DemoError(f"views 0 and 1 of {rel} are equal")
    path = os.path.join(aug_base, "0", "train", rel)
    params = os.getxattr(path, "user.featurefs.augment").decode()
    print(f"  view 0 of train/{rel}: user.featurefs.augment = {params}")


def idle(stats):
    q, p = stats.get("queue", {}), stats.get("prefetch", {})
    return (not q.get("in_flight", 1) and not p.get("in_flight", 1) and not p.get("queued", 1)
            and p.get("walks", 0) == p.get("walks_done", -1))


def warm_up(mount, path, timeout=120):
    """Reads one feature and waits until the mount has nothing in flight:
    its first extraction measures the batch size (seconds, once per
    mount), which is no epoch's cost. Returns the images the model ran on
    and the seconds taken."""
    before = read_stats(mount)
    t0 = time.perf_counter()
    np.load(path)
    while not idle(st := read_stats(mount)):
        if "error" in st:
            raise DemoError(f"{mount}/.featurefs/stats: {st['error']}")
        if time.perf_counter() - t0 > timeout:
            raise DemoError(f"the mount still busy {timeout} s after reading {path}")
        time.sleep(0.1)
    n = count(read_stats(mount), "extraction", "batched_items") - count(before, "extraction", "batched_items")
    return n, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mount")
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--layer", default="layer12")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--augment", type=int, default=0, metavar="K",
                    help="also train on the mount's K augmented views (its --augment K)")
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args()
    if args.epochs < 1 or args.augment < 0:
        ap.error("need --epochs >= 1 and --augment >= 0")

    base = os.path.join(args.mount, "features", args.model, args.layer)
    train_root = os.path.join(base, "train")
    # Listing computes nothing.
    train_ds, _ = loader(train_root, args.workers, True)
    val_ds, val_dl = loader(os.path.join(base, "val"), args.workers, False)
    classes = train_ds.classes

    try:
        n, dt = warm_up(args.mount, val_ds.samples[0][0])
        print(f"warm-up: read {os.path.relpath(val_ds.samples[0][0], base)}: the mount measured its batch size "
              f"and ran the model on {n} images (the file's directory) in {dt:.2f} s, before any epoch")
        print(f"plain: {train_root}, {args.epochs} epochs")
        plain, shape = train(args.mount, [train_root] * args.epochs, val_dl, classes, args.workers,
                             [("plain", EXTRACTED if e == 0 else CACHED)
                              for e in range(args.epochs)])
        aug = []
        if args.augment:
            k = args.augment
            aug_base = base + "-aug"
            views = [e % k for e in range(args.epochs + (1 if args.epochs >= k else 0))]
            print(f"augmented: {aug_base}/{{(epoch - 1) % {k}}}/train, {args.epochs} epochs")
            fresh = min(k, args.epochs)
            print(f"  with {k} views, epochs 1-{fresh} each read a view never read before: each runs the "
                  "model on every image" + (f"; epoch {len(views)} reads view {views[-1]} again, from the cache"
                                            if len(views) > args.epochs else ""))
            notes = [(f"view {v}", f"a new view: {EXTRACTED}" if v not in views[:e] else CACHED)
                     for e, v in enumerate(views)]
            aug, _ = train(args.mount, [os.path.join(aug_base, str(v), "train") for v in views], val_dl,
                           classes, args.workers, notes)
            check_views(train_root, aug_base, k, train_ds)
    except (DemoError, OSError) as e:
        print(f"demo: {e}", file=sys.stderr)
        return 1

    stats = read_stats(args.mount)
    print()
    print("featurefs demo summary")
    print(f"  features        {base}")
    print(f"  classes         {len(classes)}: {', '.join(classes)}")
    print(f"  samples         {len(train_ds)} train, {len(val_ds)} val")
    print(f"  sample          float32 {'x'.join(map(str, shape))} ({4 * int(np.prod(shape))} bytes)")
    mean_cached = None
    if len(plain) > 1:
        mean_cached = sum(e["seconds"] for e in plain[1:]) / (len(plain) - 1)
        print(f"  plain           epoch 1 {plain[0]['seconds']:.2f} s (extraction); epochs 2-{len(plain)} "
              f"{mean_cached:.2f} s each (cache): {plain[0]['seconds'] / mean_cached:.1f}x faster")
    if aug:
        new, again = aug[:args.augment], aug[args.augment:]
        mean_new = sum(e["seconds"] for e in new) / len(new)
        print(f"  augmented       epochs 1-{len(new)} {mean_new:.2f} s each: a new view each, extracted "
              f"({mean_new / plain[0]['seconds']:.2f}x plain epoch 1's time)")
        if again and mean_cached:
            a = sum(e["seconds"] for e in again) / len(again)
            print(f"                  epoch{'s' if len(again) > 1 else ''} {len(new) + 1}"
                  f"{'-' + str(len(aug)) if len(again) > 1 else ''} {a:.2f} s: a view read before, "
                  f"from the cache ({a / mean_cached:.2f}x a cached plain epoch's time)")
        m = min(len(plain), len(aug))
        print(f"  val accuracy    after {m} epochs: plain {plain[m - 1]['correct']}/{plain[m - 1]['total']}, "
              f"augmented {aug[m - 1]['correct']}/{aug[m - 1]['total']} "
              "(random weights, synthetic images: not meaningful)")
    else:
        print(f"  val accuracy    {plain[-1]['correct']}/{plain[-1]['total']} "
              "(random weights, synthetic images: not meaningful)")
    fs, cache, ex = stats.get("fs", {}), stats.get("cache", {}), stats.get("extractor", {})
    print(f"  mount           device {stats.get('device', '?')}: {fs.get('extractions', '?')} extractions "
          f"({ex.get('batches', '?')} model runs, {ex.get('infer_seconds', 0):.1f} s inference), "
          f"{fs.get('cache_hits', '?')} feature-cache hits, {fs.get('read_bytes', 0) / 2**20:.0f} MiB read "
          f"through FUSE; cache holds {cache.get('entries', '?')} features, "
          f"{cache.get('bytes', 0) / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
