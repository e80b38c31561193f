#!/usr/bin/env python3
"""PyTorch side of scripts/gpu-check.sh (run with the GPU host's python,
which has torch and torchvision with CUDA). Subcommands, each printing JSON
on stdout:

  info [--device cuda]        torch, torchvision, CUDA and cuDNN versions, the GPU;
                              exit 1 with one line when PyTorch cannot use a GPU
  export --out M.onnx         ResNet-50 with scripts/export_model.py's seeded
                              random weights (build("resnet50", 0)), opset 17,
                              dynamic batch (the TorchScript exporter, which
                              needs no onnxscript)
  images --out DIR --n N      N ImageNet-like JPEGs, sides 300-800 px, in
                              DIR/train/cNN/ (10 classes), made on all cores
  fidelity --mount ROOT --images DIR --tf32 0|1 [--device cuda]
                              torchvision's layer12 (layer3[3]) and layer18
                              (avgpool) on the GPU, TF32 as asked, against the
                              .npy files featurefs serves under
                              ROOT/features/resnet50/<layer>/: cosine per image
  torch --images DIR --layer L --batch B --tf32 0|1 [--epochs 3] [--device cuda]
                              PyTorch end to end: a DataLoader with one PIL
                              worker per core, pin_memory, the model
                              truncated at L on the GPU; images/s of each
                              epoch after the first (workers persist)
  loader --root DIR           an unmodified DataLoader (DatasetFolder,
                              np.load, one worker per core) over DIR: the
                              images/s of epoch 1
  e2e-mount --root DIR [--device cuda] [--t0 EPOCH_S]
                              what a user runs over a featurefs mount:
                              DatasetFolder(DIR, loader=np.load), a shuffling
                              DataLoader (batch 64, one worker per core,
                              pin_memory), each batch moved to the GPU; epoch 1
                              only: scan and epoch seconds, images/s, and the
                              wall seconds since --t0 (the mount's start)
  e2e-torch --images DIR --layer L --batch B --tf32 0|1 [--device cuda] [--t0 EPOCH_S]
                              the same user without featurefs: ImageFolder +
                              PIL + torchvision's transforms, a shuffling
                              DataLoader (batch B, one worker per core,
                              pin_memory), the model truncated at L on the
                              GPU (cudnn.benchmark, TF32 as asked); epoch 1
                              only, features left on the GPU as a head would
                              use them; the same figures, wall since --t0
                              (this process's start when not given)
"""
import argparse
import glob
import inspect
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

def cores() -> int:
    return len(os.sched_getaffinity(0))


def cmd_info(a):
    import torch
    import torchvision
    if a.device == "cpu":  # the rehearsal on a machine without a GPU
        json.dump({"torch": torch.__version__, "torchvision": torchvision.__version__, "cuda": None, "cudnn": None,
                   "gpu": None, "python": sys.executable}, sys.stdout)
        print()
        return 0
    if not torch.cuda.is_available():
        print(f"PyTorch {torch.__version__} at {sys.executable} cannot use a GPU "
              f"(torch.cuda.is_available() is False; CUDA build: {torch.version.cuda})", file=sys.stderr)
        return 1
    p = torch.cuda.get_device_properties(0)
    json.dump({"torch": torch.__version__, "torchvision": torchvision.__version__, "cuda": torch.version.cuda,
               "cudnn": torch.backends.cudnn.version(), "gpu": p.name, "gpu_memory_bytes": p.total_memory,
               "python": sys.executable}, sys.stdout)
    print()
    return 0


def cmd_export(a):
    import torch
    from export_model import build
    model = build("resnet50", 0)
    kw = {}
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kw["dynamo"] = False
    tmp = a.out + ".tmp"
    torch.onnx.export(model, torch.randn(1, 3, 224, 224), tmp, opset_version=17,
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
                      do_constant_folding=True, **kw)
    os.replace(tmp, a.out)
    json.dump({"model": a.out}, sys.stdout)
    print()
    return 0


def _make_image(args):
    path, seed = args
    from PIL import Image, ImageDraw
    rng = np.random.default_rng(seed)
    w, h = (int(x) for x in rng.integers(300, 801, 2))
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    a = np.stack([127 + 127 * np.sin(x / rng.uniform(15, 80) + rng.uniform(0, 6)),
                  255 * (y / (h - 1)) ** rng.uniform(0.5, 2),
                  np.where((x // rng.integers(7, 40) + y // rng.integers(7, 40)) % 2, rng.integers(150, 256), rng.integers(0, 100))], -1)
    a = np.clip(a + rng.normal(0, rng.uniform(5, 30), a.shape), 0, 255).astype(np.uint8)
    im = Image.fromarray(a)
    d = ImageDraw.Draw(im)
    for _ in range(int(rng.integers(2, 8))):
        x0, x1 = sorted(rng.integers(0, w, 2).tolist())
        y0, y1 = sorted(rng.integers(0, h, 2).tolist())
        d.ellipse([x0, y0, x1, y1], fill=tuple(int(c) for c in rng.integers(0, 256, 3)))
    im.save(path, quality=int(rng.integers(75, 96)))


def cmd_images(a):
    from multiprocessing import Pool
    jobs = []
    for i in range(a.n):
        d = os.path.join(a.out, "train", f"c{i % 10:02d}")
        os.makedirs(d, exist_ok=True)
        jobs.append((os.path.join(d, f"{i:05d}.jpg"), 1000 + i))
    with Pool(cores()) as p:
        p.map(_make_image, jobs, chunksize=16)
    json.dump({"images": a.n, "dir": a.out}, sys.stdout)
    print()
    return 0


def _tf():
    from torchvision import transforms
    return transforms.Compose([
        transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(),
        transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])


def _sync(device):
    import torch
    if device == "cuda":
        torch.cuda.synchronize()


def _set_tf32(on: bool):
    import torch
    torch.backends.cudnn.allow_tf32 = on
    torch.backends.cuda.matmul.allow_tf32 = on


def _truncated(layer, device):
    import torch
    from export_model import build
    m = build("resnet50", 0)
    if layer == "layer12":
        net = torch.nn.Sequential(m.conv1, m.bn1, m.relu, m.maxpool, m.layer1, m.layer2, m.layer3[:4])
    elif layer == "layer18":
        net = torch.nn.Sequential(m.conv1, m.bn1, m.relu, m.maxpool, m.layer1, m.layer2, m.layer3, m.layer4,
                                  m.avgpool, torch.nn.Flatten(1))
    else:
        raise SystemExit(f"unknown layer {layer}")
    return net.eval().to(device)


def _npy_name(key):
    return os.path.splitext(key)[0] + ".npy"


def cmd_fidelity(a):
    import torch
    from PIL import Image
    _set_tf32(bool(a.tf32))
    tf = _tf()
    keys = sorted(os.path.relpath(p, a.images) for p in glob.glob(os.path.join(a.images, "**", "*"), recursive=True)
                  if os.path.splitext(p)[1].lower() in (".jpg", ".jpeg", ".png"))
    out = {"tf32": bool(a.tf32), "layers": {}}
    for layer in ("layer12", "layer18"):
        net = _truncated(layer, a.device)
        cos = {}
        with torch.inference_mode():
            for i in range(0, len(keys), 32):
                chunk = keys[i:i + 32]
                xs = []
                for k in chunk:
                    with Image.open(os.path.join(a.images, k)) as im:
                        xs.append(tf(im.convert("RGB")))
                ref = net(torch.stack(xs).to(a.device)).flatten(1).double().cpu().numpy()
                for k, r in zip(chunk, ref):
                    p = os.path.join(a.mount, "features", "resnet50", layer, _npy_name(k))
                    if not os.path.exists(p):
                        p = os.path.join(a.mount, "features", "resnet50", layer, k + ".npy")
                    f = np.load(p).astype(np.float64).ravel()
                    cos[k] = float(f @ r / np.sqrt((f @ f) * (r @ r)))
        v = np.array(list(cos.values()))
        worst = min(cos, key=cos.get)
        out["layers"][layer] = {"images": len(v), "mean": float(v.mean()), "min": float(v.min()), "worst": worst,
                                "holds": bool(v.mean() >= 0.999 and v.min() >= 0.995)}
    json.dump(out, sys.stdout)
    print()
    return 0


class _Files:
    def __init__(self, paths):
        self.paths, self.tf = paths, _tf()

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        from PIL import Image
        with Image.open(self.paths[i]) as im:
            return self.tf(im.convert("RGB"))


def cmd_torch(a):
    import torch
    _set_tf32(bool(a.tf32))
    torch.backends.cudnn.benchmark = True
    gpu = a.device == "cuda"
    paths = sorted(glob.glob(os.path.join(a.images, "**", "*.jpg"), recursive=True))
    net = _truncated(a.layer, a.device)
    dl = torch.utils.data.DataLoader(_Files(paths), batch_size=a.batch, num_workers=cores(), pin_memory=gpu,
                                     persistent_workers=True, prefetch_factor=4)
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    with torch.inference_mode():
        net(torch.randn(a.batch, 3, 224, 224, device=a.device))  # cuDNN autotuning, not timed
        _sync(a.device)
        rates = []
        for _ in range(a.epochs):
            t0 = time.perf_counter()
            n = 0
            for x in dl:
                y = net(x.to(a.device, non_blocking=True))
                y.cpu()  # the features on the host, as featurefs returns them
                n += x.shape[0]
            _sync(a.device)
            rates.append(n / (time.perf_counter() - t0))
    steady = rates[1:] or rates
    out = {"layer": a.layer, "batch": a.batch, "workers": cores(), "images": len(paths),
           "epochs_images_per_s": rates, "images_per_s": float(np.mean(steady))}
    if gpu:
        out["gpu_mem_max_bytes"] = torch.cuda.max_memory_reserved()
    json.dump(out, sys.stdout)
    print()
    return 0


def cmd_loader(a):
    import torch
    import torchvision
    ds = torchvision.datasets.DatasetFolder(a.root, loader=np.load, extensions=(".npy",))
    dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, num_workers=cores())
    t0 = time.perf_counter()
    n = 0
    for x, _ in dl:
        n += x.shape[0]
    secs = time.perf_counter() - t0
    json.dump({"root": a.root, "images": n, "seconds": secs, "images_per_s": n / secs}, sys.stdout)
    print()
    return 0


def _e2e_epoch(dl, device, step):
    """Epoch 1 of dl: step(x) per batch; images and seconds, the device synced."""
    t0 = time.perf_counter()
    n = 0
    for x, _ in dl:
        step(x.to(device, non_blocking=True))
        n += x.shape[0]
    _sync(device)
    return n, time.perf_counter() - t0


def _e2e_out(kind, n, scan, secs, t0, extra):
    out = {"kind": kind, "images": n, "scan_seconds": scan, "epoch_seconds": secs, "images_per_s": n / secs,
           "wall_seconds": time.time() - t0}
    out.update(extra)
    json.dump(out, sys.stdout)
    print()
    return 0


def cmd_e2e_mount(a):
    t0 = a.t0 or time.time()
    import torch
    import torchvision
    ts = time.perf_counter()
    ds = torchvision.datasets.DatasetFolder(a.root, loader=np.load, extensions=(".npy",))
    scan = time.perf_counter() - ts
    dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, num_workers=cores(),
                                     pin_memory=a.device == "cuda")
    n, secs = _e2e_epoch(dl, a.device, lambda x: None)
    return _e2e_out("mount", n, scan, secs, t0, {"root": a.root, "batch": 64, "workers": cores()})


def cmd_e2e_torch(a):
    t0 = a.t0 or time.time()
    import torch
    import torchvision
    _set_tf32(bool(a.tf32))
    torch.backends.cudnn.benchmark = True
    net = _truncated(a.layer, a.device)
    ts = time.perf_counter()
    ds = torchvision.datasets.ImageFolder(os.path.join(a.images, "train"), transform=_tf())
    scan = time.perf_counter() - ts
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=cores(),
                                     pin_memory=a.device == "cuda")
    with torch.inference_mode():
        n, secs = _e2e_epoch(dl, a.device, net)
    return _e2e_out("torch", n, scan, secs, t0, {"layer": a.layer, "batch": a.batch, "workers": cores()})


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("info")
    p.add_argument("--device", default="cuda")
    p = sub.add_parser("export")
    p.add_argument("--out", required=True)
    p = sub.add_parser("images")
    p.add_argument("--out", required=True)
    p.add_argument("--n", type=int, default=2000)
    p = sub.add_parser("fidelity")
    p.add_argument("--mount", required=True)
    p.add_argument("--images", required=True)
    p.add_argument("--tf32", type=int, default=0)
    p.add_argument("--device", default="cuda")
    p = sub.add_parser("torch")
    p.add_argument("--images", required=True)
    p.add_argument("--layer", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--tf32", type=int, default=0)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--device", default="cuda")
    p = sub.add_parser("loader")
    p.add_argument("--root", required=True)
    p = sub.add_parser("e2e-mount")
    p.add_argument("--root", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--t0", type=float, default=0)
    p = sub.add_parser("e2e-torch")
    p.add_argument("--images", required=True)
    p.add_argument("--layer", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--tf32", type=int, default=0)
    p.add_argument("--device", default="cuda")
    p.add_argument("--t0", type=float, default=0)
    a = ap.parse_args()
    return {"info": cmd_info, "export": cmd_export, "images": cmd_images, "fidelity": cmd_fidelity,
            "torch": cmd_torch, "loader": cmd_loader,
            "e2e-mount": cmd_e2e_mount, "e2e-torch": cmd_e2e_torch}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
