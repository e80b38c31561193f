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
    rng = np.random.default_rng(seed)
    _picture(rng).save(path, quality=int(rng.integers(75, 96)))


def _picture(rng):
    """An ImageNet-like RGB picture (PIL), sides 300-800 px, drawn from rng."""
    from PIL import Image, ImageDraw
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
    return im


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


# --- the decode step (issue 38): --decode gpu against torchvision's PIL pipeline

DECODE_LAYERS = ("layer12", "layer18", "layer19")  # layer19: ResNet-50's output, the last layer
DECODE_BAR = {"mean_cosine": 0.9999, "max_rel_l2": 1e-2}  # the bar for --decode auto, per layer


def _make_kind(args):
    path, seed, kind = args
    import jpeg_kinds
    rng = np.random.default_rng(seed)
    info = jpeg_kinds.save_kind(_picture(rng), kind, path, rng)
    info["file"] = path
    return info


def cmd_jpegs(a):
    """N ImageNet-like JPEGs of the decode step's kinds (scripts/jpeg_kinds.py)
    in DIR/<kind>/NNNNN.jpg, made on all cores."""
    import jpeg_kinds
    from multiprocessing import Pool
    jobs = []
    for i in range(a.n):
        kind = jpeg_kinds.CYCLE[i % len(jpeg_kinds.CYCLE)]
        d = os.path.join(a.out, kind)
        os.makedirs(d, exist_ok=True)
        jobs.append((os.path.join(d, f"{i:05d}.jpg"), a.seed + i, kind))
    with Pool(cores()) as p:
        infos = p.map(_make_kind, jobs, chunksize=4)
    kinds = {}
    for x in infos:
        kinds[x["kind"]] = kinds.get(x["kind"], 0) + 1
    rst = [x for x in infos if x["kind"] == "restart"]
    json.dump({"images": a.n, "dir": a.out, "kinds": kinds,
               "restart_markers": sum(x["rst_markers"] for x in rst),
               "restart_intervals": sorted({x["restart_interval"] for x in rst})}, sys.stdout)
    print()
    return 0


def _kind_of(key):
    """A decode-set image's kind: its first directory (jpegs' kinds, "gen")."""
    return key.split(os.sep, 1)[0]


def _resnet50_layers(device):
    """A function of a batch to ResNet-50's (seeded, as export) layer12,
    layer18 and layer19 (the output) in one forward pass, each as the
    truncated models of _truncated compute it."""
    import torch
    from export_model import build
    m = build("resnet50", 0).eval().to(device)

    def run(x):
        x = m.maxpool(m.relu(m.bn1(m.conv1(x))))
        x = m.layer3[:4](m.layer2(m.layer1(x)))
        l12 = x
        x = torch.flatten(m.avgpool(m.layer4(m.layer3[4:](x))), 1)
        return {"layer12": l12, "layer18": x, "layer19": m.fc(x)}
    return run


def _decode_counts(files):
    """How many images the extractor decoded on the GPU and on the CPU, from
    its logs (extract's stderr at --log-level info) or a mount's stats file
    (JSON): every number whose key names decoding and the GPU, nvJPEG or the
    CPU, and the log lines that mention them: extract's summary line ("N
    decoded on the GPU, M decoded on the CPU (...)") and the stats file's
    extractor.gpu_decode, both there only when a GPU decoder ran."""
    import re
    figures, lines = {}, []

    def walk(x, path):
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(x, (int, float)) and not isinstance(x, bool):
            low = path.lower()
            if "decod" in low and any(w in low for w in ("gpu", "nvjpeg", "cpu")):
                figures[path] = x

    for f in files:
        try:
            text = open(f, errors="replace").read()
        except OSError:
            continue
        try:
            walk(json.loads(text), "")
            continue
        except ValueError:
            pass
        for line in text.splitlines():
            low = line.lower()
            if "decod" in low and any(w in low for w in ("gpu", "nvjpeg", "cpu")):
                if len(lines) < 8 and line.strip()[:300] not in lines:
                    lines.append(line.strip()[:300])
                for m in re.finditer(r"(\d+)\s+(?:images?\s+|jpegs?\s+)?decoded\s+on\s+the\s+(gpu|cpu)", low):
                    figures[f"{os.path.basename(f)}: decoded on the {m.group(2).upper()}"] = int(m.group(1))
    out = {"figures": figures, "lines": lines}
    if not figures:
        out["todo"] = ("no count of images decoded on the GPU: no GPU decoder ran (the extract log's 'jpeg decode' "
                       "line says why: no GPU, nvJPEG missing, or --decode cpu in a rehearsal)")
    return out


def cmd_decode_fidelity(a):
    """Features of `featurefs extract --decode ...` (under --features
    ROOT/<layer>/, one run per layer) against torchvision's PIL pipeline on
    --device, per image: cosine and relative L2 per layer, by JPEG kind; and
    torchvision.io.decode_jpeg on --decode-device (nvJPEG on a GPU) against
    PIL's convert("RGB"), pixel by pixel, by kind."""
    import torch
    import torchvision
    from PIL import Image
    from torchvision.io import ImageReadMode, decode_jpeg
    _set_tf32(False)
    tf = _tf()
    keys = sorted(os.path.relpath(p, a.images) for p in glob.glob(os.path.join(a.images, "**", "*"), recursive=True)
                  if os.path.splitext(p)[1].lower() in (".jpg", ".jpeg", ".png"))
    if not keys:
        print(f"decode-fidelity: no image under {a.images}", file=sys.stderr)
        return 1
    run = _resnet50_layers(a.device)
    per = {l: {} for l in DECODE_LAYERS}  # layer -> key -> (cosine, rel L2)
    missing = {l: [] for l in DECODE_LAYERS}
    with torch.inference_mode():
        for i in range(0, len(keys), a.batch):
            chunk = keys[i:i + a.batch]
            xs = []
            for k in chunk:
                with Image.open(os.path.join(a.images, k)) as im:
                    xs.append(tf(im.convert("RGB")))
            refs = run(torch.stack(xs).to(a.device))
            for layer in DECODE_LAYERS:
                ref = refs[layer].flatten(1).double().cpu().numpy()
                for k, r in zip(chunk, ref):
                    p = os.path.join(a.features, layer, _npy_name(k))
                    if not os.path.exists(p):
                        p = os.path.join(a.features, layer, k + ".npy")
                    if not os.path.exists(p):
                        missing[layer].append(k)
                        continue
                    f = np.load(p).astype(np.float64).ravel()
                    if f.shape != r.shape:
                        raise SystemExit(f"decode-fidelity: {p}: {f.size} values, torchvision's {layer} has {r.size}")
                    cos = float(f @ r / np.sqrt((f @ f) * (r @ r)))
                    rel = float(np.linalg.norm(f - r) / np.linalg.norm(r))
                    per[layer][k] = (cos, rel)
    out = {"device": a.device, "decode_device": a.decode_device, "decode": a.decode, "images": len(keys),
           "bar": DECODE_BAR, "layers": {}, "kinds": {}, "pixels": {}}
    kinds = sorted({_kind_of(k) for k in keys})
    for layer in DECODE_LAYERS:
        v = per[layer]
        cos = np.array([c for c, _ in v.values()]) if v else np.array([np.nan])
        rel = np.array([r for _, r in v.values()]) if v else np.array([np.nan])
        worst = min(v, key=lambda k: v[k][0]) if v else None
        worst_rel = max(v, key=lambda k: v[k][1]) if v else None
        holds = bool(v and not missing[layer] and cos.mean() >= DECODE_BAR["mean_cosine"]
                     and rel.max() <= DECODE_BAR["max_rel_l2"])
        out["layers"][layer] = {"images": len(v), "missing": len(missing[layer]), "missing_first": missing[layer][:5],
                                "mean_cosine": float(cos.mean()), "min_cosine": float(cos.min()), "worst": worst,
                                "max_rel_l2": float(rel.max()), "worst_rel_l2": worst_rel, "holds": holds}
        for kind in kinds:
            kv = [x for k, x in v.items() if _kind_of(k) == kind]
            if kv:
                out["kinds"].setdefault(kind, {})[layer] = {
                    "images": len(kv), "mean_cosine": float(np.mean([c for c, _ in kv])),
                    "min_cosine": float(min(c for c, _ in kv)), "max_rel_l2": float(max(r for _, r in kv))}
    out["holds"] = all(x["holds"] for x in out["layers"].values())

    # pixels: torchvision.io.decode_jpeg (nvJPEG on a GPU) against PIL
    for k in keys:
        if os.path.splitext(k)[1].lower() == ".png":
            continue
        kind = _kind_of(k)
        s = out["pixels"].setdefault(kind, {"images": 0, "refused": 0, "refused_first": None, "values": 0,
                                            "differing": 0, "abs_sum": 0, "max_abs": 0, "bit_exact": 0})
        s["images"] += 1
        path = os.path.join(a.images, k)
        with Image.open(path) as im:
            ref = np.asarray(im.convert("RGB"))
        try:
            t = decode_jpeg(torchvision.io.read_file(path), mode=ImageReadMode.RGB, device=a.decode_device)
            got = t.permute(1, 2, 0).cpu().numpy()
            if got.shape != ref.shape:
                raise ValueError(f"decoded to {got.shape[1]}x{got.shape[0]}x{got.shape[2]}, PIL to "
                                 f"{ref.shape[1]}x{ref.shape[0]}x{ref.shape[2]}")
        except Exception as e:  # refused (progressive, CMYK, ...): the extractor decodes these on the CPU
            s["refused"] += 1
            if s["refused_first"] is None:
                s["refused_first"] = f"{k}: {type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
            continue
        d = np.abs(got.astype(np.int16) - ref.astype(np.int16))
        s["values"] += d.size
        s["differing"] += int(np.count_nonzero(d))
        s["abs_sum"] += int(d.sum())
        s["max_abs"] = max(s["max_abs"], int(d.max()))
        s["bit_exact"] += int(not d.any())
    for s in out["pixels"].values():
        s["differing_share"] = s["differing"] / s["values"] if s["values"] else float("nan")
        s["mean_abs"] = s["abs_sum"] / s["values"] if s["values"] else float("nan")
    out["decode_counts"] = _decode_counts(a.logs)
    json.dump(out, sys.stdout)
    print()
    return 0


def _med(v):
    import statistics
    return statistics.median(v) if v else float("nan")


def _num(x):
    if x != x:
        return "n/a"
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _x(v):
    return "n/a" if v != v else f"{v:.2f}x"


def _pct(v):
    return "n/a" if v != v else f"{100 * v:.0f}%"


def _rng(v):
    return f"{_num(min(v))}-{_num(max(v))}" if v else "n/a"


def cmd_decode_report(a):
    """The markdown section of the decode step and the decode throughput
    comparison, from gpu-check's results file."""
    res = [json.loads(l) for l in open(a.results) if l.strip()]
    res = [x for x in res if x["round"] >= 0]
    of = lambda kind: [x["r"] for x in res if x["kind"] == kind]
    rounds = len({x["round"] for x in res if x["kind"].startswith("dt-")})
    rehearsal = a.rehearsal == 1
    print("## JPEG decode on the GPU (`--decode`, issue 38)")
    print()
    if rehearsal:
        print("**REHEARSAL ON A MACHINE WITHOUT A GPU (GPU_CHECK_REHEARSAL=1): NOT GPU FIGURES.** Every run below "
              f"used `--device cpu` and `--decode {a.gpu_decode}` where a GPU host runs `--device cuda --decode gpu`, "
              f"torchvision's `decode_jpeg` ran on `{a.decode_device}` (libjpeg-turbo, not nvJPEG), and the sets are "
              "tiny: what it shows is that the steps run and the report is written, nothing about nvJPEG.")
        print()
    fid = of("decode-fidelity")
    if fid:
        r = fid[0]
        gen = r["kinds"].get("gen", {})
        print(f"### Fidelity: `featurefs extract --device {a.device} --decode {r['decode']}` against torchvision's PIL "
              f"pipeline on the same device ({r['images']} images)")
        print()
        print("Features of a seeded ResNet-50 (scripts/export_model.py, fp32, TF32 off on both sides) at layer12, "
              "layer18 and layer19 (the output), one `featurefs extract` run per layer, against torchvision's "
              "`Resize(256)`, `CenterCrop(224)`, `ToTensor`, `Normalize` on `PIL.Image.open(...).convert(\"RGB\")`. "
              f"Bar for `--decode auto`: mean cosine >= {DECODE_BAR['mean_cosine']} and max relative L2 "
              f"(‖featurefs - torchvision‖ / ‖torchvision‖) <= {DECODE_BAR['max_rel_l2']:g}, every layer.")
        print()
        print("| layer | images | mean cosine | worst cosine (image) | max relative L2 (image) | missing | bar for auto |")
        print("|---|---|---|---|---|---|---|")
        for layer, v in r["layers"].items():
            print(f"| {layer} | {v['images']} | {v['mean_cosine']:.6f} | {v['min_cosine']:.6f} ({v['worst']}) "
                  f"| {v['max_rel_l2']:.2e} ({v['worst_rel_l2']}) | {v['missing']} | {'holds' if v['holds'] else 'MISSED'} |")
        print()
        print("By JPEG kind (mean / worst cosine, max relative L2):")
        print()
        print("| kind | images | " + " | ".join(r["layers"]) + " |")
        print("|---|---|" + "---|" * len(r["layers"]))
        import jpeg_kinds
        for kind, lv in sorted(r["kinds"].items()):
            n = max(x["images"] for x in lv.values())
            cells = [f"{x['mean_cosine']:.6f} / {x['min_cosine']:.6f}, {x['max_rel_l2']:.1e}" if x else "n/a"
                     for x in (lv.get(l) for l in r["layers"])]
            print(f"| {kind}: {jpeg_kinds.DESCRIBE.get(kind, kind)} | {n} | " + " | ".join(cells) + " |")
        print()
        dd = "nvJPEG" if r["decode_device"].startswith("cuda") else "libjpeg-turbo on the CPU: a rehearsal"
        print(f"Pixels: `torchvision.io.decode_jpeg(..., mode=RGB, device=\"{r['decode_device']}\")` ({dd}) against "
              "PIL's `convert(\"RGB\")`, every JPEG of the set; refused: decode_jpeg raised (the extractor decodes such "
              "JPEGs on the CPU).")
        print()
        print("| kind | JPEGs | refused | differing pixel values | mean abs difference | max abs difference | bit-exact images | first refusal |")
        print("|---|---|---|---|---|---|---|---|")
        for kind, s in sorted(r["pixels"].items()):
            share = s["differing_share"]
            print(f"| {kind} | {s['images']} | {s['refused']} | {'n/a' if share != share else f'{100 * share:.2f}%'} "
                  f"| {_num(s['mean_abs'])} | {s['max_abs'] if s['values'] else 'n/a'} | {s['bit_exact']} "
                  f"| {(s['refused_first'] or '').replace('|', '/')} |")
        print()
        dc = r["decode_counts"]
        if "todo" in dc:
            print(f"Decoded on the GPU vs the CPU by the extractor: **{dc['todo']}.**")
        else:
            print("Decoded on the GPU vs the CPU by the extractor (from its logs): "
                  + ", ".join(f"{k} {v}" for k, v in sorted(dc["figures"].items())) + ".")
        if dc["lines"]:
            print()
            print("Its log lines about decoding:")
            print()
        for line in dc["lines"]:
            print(f"    {line}")
        print()
        print(f"**Verdict for `--decode auto` on this GPU type: {'the bar holds' if r['holds'] else 'the bar is MISSED'}"
              f"{' (a rehearsal: CPU decode, no verdict on nvJPEG)' if rehearsal else ''}.**")
        print()
    dt = [x for x in res if x["kind"].startswith("dt-")]
    if not dt:
        print("### Decode throughput: not run (GPU_CHECK_STEPS)")
        print()
        return 0 if not fid or fid[0]["holds"] or not rehearsal else 3
    g = lambda kind, key="images_per_s": [x[key] for x in of(kind) if x.get(key) is not None]
    bg, bc, ort, dec = g("dt-bench-gpu"), g("dt-bench-cpu"), g("dt-ort"), g("dt-decode")
    mg, mc, pt = g("dt-mount-gpu"), g("dt-mount-cpu"), g("dt-torch")
    cpu_g = [1000 * x["epoch_cpu_seconds"] / x["images"] for x in of("dt-mount-gpu") if x.get("images")]
    cpu_c = [1000 * x["epoch_cpu_seconds"] / x["images"] for x in of("dt-mount-cpu") if x.get("images")]
    bcpu_g = [1000 * x["cpu_seconds"] / x["images"] for x in of("dt-bench-gpu") if x.get("images")]
    bcpu_c = [1000 * x["cpu_seconds"] / x["images"] for x in of("dt-bench-cpu") if x.get("images")]

    def verdict(ok, x, *figs):
        """met/MISSED from medians of 3 or more rounds of every figure in figs."""
        n = min(len(f) for f in figs)
        if x != x:
            return "no verdict"
        if rehearsal:
            return "a rehearsal: no verdict"
        if n < 3:
            return f"no verdict from {n} round(s)"
        return "met" if ok else "MISSED"
    batch = (of("dt-bench-gpu") or [{}])[0].get("batch", "?")
    gd = a.gpu_decode
    print(f"### Decode throughput at layer18 ({a.images} ImageNet-like JPEGs for the extractor, {a.e2e_images} for "
          f"epoch 1; {rounds} interleaved round(s), medians (min-max))")
    print()
    print(f"Extractor: `featurefs bench --modes extract --layers layer18 --decode {gd}` and `--decode cpu` (batch {batch}); "
          "CPU decode ceiling: `featurefs bench --modes decode` (decode and preprocess on every core, no model); GPU "
          "ceiling: `featurefs bench --modes ort` (bare ONNX Runtime on random input at the same batch size). "
          f"Epoch 1: an unmodified DataLoader (DatasetFolder, np.load, batch 64, one worker per core) through a fresh "
          f"mount with the defaults and `--decode {gd}` or `--decode cpu`, vs PyTorch end to end (ImageFolder + PIL + the "
          "truncated model on the same device). Mount CPU: the mount process's utime+stime (/proc/PID/stat) from "
          "the moment it is mounted to the epoch's end, per image.")
    print()
    arm = "`--decode gpu`" if gd == "gpu" else f"`--decode gpu` arm (ran `--decode {gd}`: a rehearsal)"
    fl = min(1.5 * _med(dec), 0.8 * _med(ort))
    ratio_x = _med(bg) / fl
    print("| figure | images/s | target | verdict |")
    print("|---|---|---|---|")
    print(f"| extractor, {arm} | {_num(_med(bg))} ({_rng(bg)}) | >= {_num(fl)} images/s (the lower of 1.5x the "
          f"CPU decode ceiling and 80% of the GPU ceiling) | **{_x(ratio_x)} of it** ({verdict(ratio_x >= 1, ratio_x, bg, dec, ort)}) |")
    print(f"| extractor, `--decode cpu` | {_num(_med(bc))} ({_rng(bc)}) | | gpu / cpu: {_x(_med(bg) / _med(bc))} |")
    print(f"| CPU decode ceiling | {_num(_med(dec))} ({_rng(dec)}) | | |")
    print(f"| GPU ceiling (bare ONNX Runtime) | {_num(_med(ort))} ({_rng(ort)}) | | |")
    e2e = _med(mg) / _med(pt)
    print(f"| epoch 1 through a mount, {arm} | {_num(_med(mg))} ({_rng(mg)}) | >= 3x PyTorch | "
          f"**{_x(e2e)}** ({verdict(e2e >= 3, e2e, mg, pt)}) |")
    print(f"| epoch 1 through a mount, `--decode cpu` | {_num(_med(mc))} ({_rng(mc)}) | | {_x(_med(mc) / _med(pt))} PyTorch |")
    print(f"| PyTorch end to end | {_num(_med(pt))} ({_rng(pt)}) | | |")
    print()
    share = _med(cpu_g) / _med(cpu_c)
    print(f"| CPU ms per image | {arm} | `--decode cpu` | ratio | target | verdict |")
    print("|---|---|---|---|---|---|")
    print(f"| the mount over epoch 1 | {_num(_med(cpu_g))} ({_rng(cpu_g)}) | {_num(_med(cpu_c))} ({_rng(cpu_c)}) | "
          f"**{_pct(share)}** | <= 40% | {verdict(share <= 0.4, share, cpu_g, cpu_c)} |")
    bs = _med(bcpu_g) / _med(bcpu_c)
    print(f"| `featurefs bench` (the whole process) | {_num(_med(bcpu_g))} ({_rng(bcpu_g)}) | {_num(_med(bcpu_c))} "
          f"({_rng(bcpu_c)}) | {_pct(bs)} | | |")
    print()
    counts = [x.get("decode_counts") for x in of("dt-mount-gpu") if x.get("decode_counts")]
    if counts and "todo" not in counts[0]:
        print(f"Decoded on the GPU vs the CPU by the `--decode {gd}` mount (first round, stats file and log): "
              + ", ".join(f"{k} {v}" for k, v in sorted(counts[0]["figures"].items())) + ".")
    else:
        print("Decoded on the GPU vs the CPU by the mount: **none decoded on the GPU: no GPU decoder ran (the mount's "
              "'jpeg decode' log line and its stats' extractor.jpeg_decode say why).**")
    print()
    if fid and rehearsal and not fid[0]["holds"]:
        print("A rehearsal decodes on the CPU, bit-exact with PIL: the bar must hold, and it does not.", file=sys.stderr)
        return 3
    return 0


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
    p = sub.add_parser("jpegs")
    p.add_argument("--out", required=True)
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--seed", type=int, default=5000)
    p = sub.add_parser("decode-fidelity")
    p.add_argument("--images", required=True)
    p.add_argument("--features", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--decode-device", default="cuda")
    p.add_argument("--decode", default="gpu")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--logs", nargs="*", default=[])
    p = sub.add_parser("decode-report")
    p.add_argument("--results", required=True)
    p.add_argument("--rehearsal", type=int, default=0)
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--decode-device", default="cuda")
    p.add_argument("--gpu-decode", default="gpu")
    p.add_argument("--images", default="?")
    p.add_argument("--e2e-images", default="?")
    a = ap.parse_args()
    return {"info": cmd_info, "export": cmd_export, "images": cmd_images, "fidelity": cmd_fidelity,
            "torch": cmd_torch, "loader": cmd_loader,
            "e2e-mount": cmd_e2e_mount, "e2e-torch": cmd_e2e_torch, "jpegs": cmd_jpegs,
            "decode-fidelity": cmd_decode_fidelity, "decode-report": cmd_decode_report}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
