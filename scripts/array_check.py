#!/usr/bin/python3
"""Check an array view against the per-file feature tree it stands for,
with numpy and an unmodified torchvision DatasetFolder (used by featurefs's
integration tests; run with Debian's /usr/bin/python3):

    /usr/bin/python3 scripts/array_check.py ROOT ARRAY

ROOT is a per-file directory (MOUNT/features/MODEL/LAYER/train), ARRAY its
array view (MOUNT/arrays/MODEL/LAYER/train.npy). It maps ARRAY with
np.load(mmap_mode="r"), reads ARRAY's .labels.npy and .rows.jsonl, and
prints JSON: rows, samples (DatasetFolder's), equal (rows byte-equal to
np.load of their sample), nan (rows of NaN whose file fails to load, as a
bad image's does), mismatch (row indices that are neither), labels_equal
(labels == DatasetFolder's targets), files_equal (the row list names
DatasetFolder's samples in order), and probe (a linear head trained for a
few steps over TensorDataset(torch.from_numpy(X)): its loss before and
after; scikit-learn's LogisticRegression's accuracy on the rows it was
fit on: the README's recipes).
"""
import json
import os
import sys
import warnings

import numpy as np

warnings.filterwarnings("ignore")


def main():
    root, array = sys.argv[1], sys.argv[2]
    import torch
    import torchvision
    ds = torchvision.datasets.DatasetFolder(root, loader=np.load, extensions=(".npy",))
    X = np.load(array, mmap_mode="r")
    base = array[:-len(".npy")]
    y = np.load(base + ".labels.npy")
    with open(base + ".rows.jsonl") as f:
        rows = [json.loads(line) for line in f]
    out = {"rows": int(X.shape[0]), "shape": list(X.shape), "dtype": str(X.dtype), "samples": len(ds),
           "equal": 0, "nan": [], "mismatch": []}
    for i, (path, _) in enumerate(ds.samples):
        if i >= X.shape[0]:
            break
        row = np.asarray(X[i])
        try:
            want = np.load(path)
        except OSError:
            if np.isnan(row).all():
                out["nan"].append(i)
            else:
                out["mismatch"].append(i)
            continue
        if want.shape == row.shape and want.tobytes() == row.tobytes():
            out["equal"] += 1
        else:
            out["mismatch"].append(i)
    out["labels_equal"] = y.dtype == np.int64 and list(y) == list(ds.targets)
    out["files_equal"] = [r["file"] for r in rows] == [os.path.relpath(p, root) for p, _ in ds.samples]
    # The README's recipe: a linear head over the whole split as tensors.
    good = ~np.isnan(np.asarray(X).reshape(X.shape[0], -1)).any(axis=1)
    Xt = torch.from_numpy(np.asarray(X)[good].reshape(int(good.sum()), -1).copy())
    Xt = Xt / Xt.norm(dim=1, keepdim=True).clamp(min=1e-12)  # unit rows: one learning rate for any layer
    yt = torch.from_numpy(np.asarray(y)[good])
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(Xt, yt), batch_size=8, shuffle=True)
    head = torch.nn.Linear(Xt.shape[1], len(ds.classes))
    opt = torch.optim.SGD(head.parameters(), lr=0.5)
    loss_fn = torch.nn.CrossEntropyLoss()
    with torch.no_grad():
        before = float(loss_fn(head(Xt), yt))
    for _ in range(20):
        for xb, yb in loader:
            opt.zero_grad()
            loss_fn(head(xb), yb).backward()
            opt.step()
    with torch.no_grad():
        after = float(loss_fn(head(Xt), yt))
    out["probe"] = {"loss_before": before, "loss_after": after}
    # And the scikit-learn recipe: LogisticRegression on the same rows.
    from sklearn.linear_model import LogisticRegression
    Xs = np.asarray(X)[good].reshape(int(good.sum()), -1)
    Xs = (Xs - Xs.mean(axis=0)) / (Xs.std(axis=0) + 1e-6)  # standardized: random weights' features are alike
    clf = LogisticRegression(C=1e3, max_iter=2000).fit(Xs, yt.numpy())
    out["probe"]["sklearn_train_accuracy"] = float(clf.score(Xs, yt.numpy()))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
