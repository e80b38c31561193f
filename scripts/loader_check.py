#!/usr/bin/python3
"""Read a feature tree with an unmodified PyTorch DatasetFolder + DataLoader
and report what it saw as JSON on stdout (used by featurefs's integration
tests; run with Debian's /usr/bin/python3):

    /usr/bin/python3 scripts/loader_check.py ROOT [--workers 4] [--batch 4] [--epochs 1] [--until FILE]

ROOT is e.g. MOUNT/features/resnet50/layer12/train. The dataset is exactly

    torchvision.datasets.DatasetFolder(ROOT, loader=np.load, extensions=(".npy",))

read by DataLoader(num_workers=W, shuffle=True). With --until FILE, epochs
run until FILE exists: the epoch that begins once it does is the last
(--epochs stays the most). The JSON holds:
  classes, class_to_idx     as DatasetFolder found them
  samples                   [{path (relative to ROOT), label, shape, dtype,
                              sha256 (of the array's raw bytes), sum}] read
                              directly with np.load, in DatasetFolder order
  loaded                    [[sha256, label], ...] for every sample the
                              DataLoader yielded in each epoch (shuffled order)
  epochs                    [{seconds, samples, bytes}]
"""
import argparse
import hashlib
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--until", help="stop after the first epoch that begins once this file exists")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    ds = torchvision.datasets.DatasetFolder(args.root, loader=np.load, extensions=(".npy",))
    dl = torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=True,
                                     num_workers=args.workers)
    loaded, epochs = [], []
    for _ in range(args.epochs):
        last = args.until is not None and os.path.exists(args.until)
        t0 = time.perf_counter()
        n = nbytes = 0
        for x, y in dl:
            for i in range(x.shape[0]):
                a = x[i].numpy()
                loaded.append([hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest(), int(y[i])])
                nbytes += a.nbytes
                n += 1
        epochs.append({"seconds": time.perf_counter() - t0, "samples": n, "bytes": nbytes})
        if last:
            break

    samples = []
    for path, label in ds.samples:
        a = np.load(path)
        samples.append({
            "path": os.path.relpath(path, args.root),
            "label": label,
            "shape": list(a.shape),
            "dtype": a.dtype.str,
            "sha256": hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest(),
            "sum": float(a.astype(np.float64).sum()),
        })
    json.dump({"classes": ds.classes, "class_to_idx": ds.class_to_idx,
               "samples": samples, "loaded": loaded, "epochs": epochs}, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
