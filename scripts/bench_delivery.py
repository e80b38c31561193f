#!/usr/bin/python3
"""Delivery: epoch 1 through the mount vs the extractor alone vs PyTorch, with a
near-free model (scripts/bench-delivery.sh runs it; issue 25).

    /usr/bin/python3 scripts/bench_delivery.py export --out M.onnx
    /usr/bin/python3 scripts/bench_delivery.py mount --bin BIN --model M.onnx --layer L --endpoint URL
        --bucket B --mnt DIR --cache-dir DIR --log FILE --prefetch tree|off [--epochs 2]
    /usr/bin/python3 scripts/bench_delivery.py cli --bin BIN --model M.onnx --layer L --mode extract|decode --dir DIR
    /usr/bin/python3 scripts/bench_delivery.py torch --dir DIR
    /usr/bin/python3 scripts/bench_delivery.py report --round KIND=JSON ... [--round ...] [...]

The model is the GPU host's stand-in: one Conv2d(3, 64, 4, stride=4) + ReLU
(seeded weights), exported to ONNX at opset 17 with a dynamic batch axis;
its output, 64x56x56 float32 = 802,816 bytes, is the size of a ResNet-50
layer12 feature, so the mount moves layer12's bytes while inference costs
almost nothing: what is left is the mount's own delivery path.

mount: `featurefs mount s3://B` (a fresh cache directory, the defaults but
--prefetch), then DatasetFolder(MOUNT/features/tiny/L/train, loader=np.load)
+ DataLoader(batch_size=64, shuffle=True, num_workers=4), EPOCHS passes.
Per pass: wall seconds, the mount process's CPU seconds (/proc/PID/stat
utime+stime), the Python side's (its own rusage plus its reaped children's:
the DataLoader workers) and the stats file before and after.

cli: `featurefs bench --modes MODE` on the local copy of the same JPEGs:
extract (decode, preprocess and batched inference on all cores: the
extractor alone) or decode (decode and preprocess alone: the CPU ceiling),
with the process's CPU seconds (children rusage; start-up and warm-up
included) and wall seconds.

torch: what a user runs without featurefs: ImageFolder over the local JPEGs
(PIL + Resize(256)/CenterCrop(224)/ToTensor/Normalize) + DataLoader(
batch_size=64, shuffle=True, num_workers=2) and the same model in torch
(same weights) under no_grad on every batch, torch threads 2.

Each subcommand prints JSON on stdout with the 1-minute load average at its
start and end; report prints one markdown section (medians over the rounds
with min-max; verdicts from the medians).
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import time
import warnings

import numpy as np
import torch
import torchvision
from torchvision import transforms

import benchlib
from benchlib import loadavg, machine_cpu, med, mount, proc_cpu, read_stats, self_cpu, unmount

warnings.filterwarnings("ignore", message="This DataLoader will create")

TF = transforms.Compose([
    transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(),
    transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
])
BATCH = 64
# Targets (issue 25): the mount's CPU per image at most this times the
# extractor's; epoch 1 through the mount at least this times PyTorch's images/s.
TARGET_CPU = 1.2
TARGET_RATE = 0.9


def build_tiny():
    """The near-free model: Conv2d(3, 64, 4, stride=4) + ReLU, seeded weights."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 64, 4, stride=4), torch.nn.ReLU()).eval()


def cmd_export(args):
    model = build_tiny()
    tmp = args.out + ".tmp"
    torch.onnx.export(model, torch.randn(1, 3, 224, 224), tmp, opset_version=17,
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}, do_constant_folding=True)
    os.replace(tmp, args.out)


def minio_cpu():
    """CPU seconds of the MinIO server processes (their cmdline runs
    'minio server'), 0 when there is none."""
    n = 0.0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            if len(cmd) > 1 and cmd[0].endswith(b"minio") and cmd[1] == b"server":
                n += proc_cpu(int(d))
        except OSError:
            pass
    return n


def loader(ds, workers):
    g = torch.Generator().manual_seed(0)
    return torch.utils.data.DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=workers, generator=g)


def cmd_mount(args):
    load0 = loadavg()
    cmd = [args.bin, "mount", "--model", f"tiny={args.model}", "--endpoint-url", args.endpoint,
           "--cache-dir", args.cache_dir, "--log-file", args.log, "--device", "cpu",
           "--prefetch", args.prefetch, *shlex.split(args.flags),
           *shlex.split(os.environ.get("BENCH_DELIVERY_MOUNT_FLAGS", "")),
           f"s3://{args.bucket}", args.mnt]
    t0 = time.perf_counter()
    pid = mount(cmd)
    mount_s = time.perf_counter() - t0
    passes = []
    try:
        root = os.path.join(args.mnt, "features", "tiny", args.layer, "train")
        ds = torchvision.datasets.DatasetFolder(root, loader=np.load, extensions=(".npy",))
        setup = time.perf_counter() - t0
        mount_cpu_setup = proc_cpu(pid)
        for _ in range(args.epochs):
            dl = loader(ds, args.workers)
            s0, m0, (p0, c0), w0 = read_stats(args.mnt), proc_cpu(pid), self_cpu(), time.perf_counter()
            (b0, t0m), io0 = machine_cpu(), minio_cpu()
            n = 0
            for x, _y in dl:
                n += len(x)
            (b1, t1m), io1 = machine_cpu(), minio_cpu()
            w1, (p1, c1), m1, s1 = time.perf_counter(), self_cpu(), proc_cpu(pid), read_stats(args.mnt)
            passes.append({"seconds": w1 - w0, "samples": n, "mount_cpu": m1 - m0, "python_cpu": p1 - p0,
                           "children_cpu": c1 - c0, "stats_before": s0, "stats_after": s1, "load": loadavg(),
                           "machine_busy": b1 - b0, "machine_total": t1m - t0m, "minio_cpu": io1 - io0})
            print(f"  {args.prefetch} pass {len(passes)}: {w1 - w0:.2f}s, {n} samples, mount CPU {m1 - m0:.2f}s",
                  file=sys.stderr)
    finally:
        unmount(args.mnt, pid)
    json.dump({"kind": args.prefetch, "mount_seconds": mount_s, "setup_seconds": setup,
               "mount_cpu_setup": mount_cpu_setup, "samples": len(ds), "passes": passes,
               "load_start": load0, "load_end": loadavg()}, sys.stdout)


def cmd_cli(args):
    load0 = loadavg()
    cmd = [args.bin, "bench", "--model", args.model, "--layers", args.layer, "--modes", args.mode,
           "--device", "cpu", args.dir]
    _, c0 = self_cpu()
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    _, c1 = self_cpu()
    if r.returncode != 0:
        sys.exit(f"featurefs bench failed ({r.returncode}): {r.stderr}")
    res = [json.loads(line) for line in r.stdout.splitlines() if line.strip().startswith("{")]
    json.dump({"kind": args.mode, "wall_seconds": wall, "cpu": c1 - c0, "results": res,
               "load_start": load0, "load_end": loadavg()}, sys.stdout)


def cmd_torch(args):
    load0 = loadavg()
    torch.set_num_threads(args.threads)
    p0, c0 = self_cpu()
    t0 = time.perf_counter()
    model = build_tiny()
    ds = torchvision.datasets.ImageFolder(args.dir, transform=TF)
    dl = loader(ds, args.workers)
    setup = time.perf_counter() - t0
    w0 = time.perf_counter()
    b0, t0m = machine_cpu()
    n = 0
    with torch.no_grad():
        for x, _y in dl:
            f = model(x)
            n += len(f)
    b1, t1m = machine_cpu()
    w1 = time.perf_counter()
    p1, c1 = self_cpu()
    json.dump({"kind": "torch", "setup_seconds": setup, "seconds": w1 - w0, "samples": n,
               "cpu": (p1 - p0) + (c1 - c0), "load_start": load0, "load_end": loadavg(),
               "machine_busy": b1 - b0, "machine_total": t1m - t0m}, sys.stdout)


# s2: the defaults but --cache-compression s2 (every feature compressed,
# ca82ffd's default), beside the default auto (large features raw).
MOUNTS = ("tree", "off", "s2")
KINDS = (*MOUNTS, "extract", "decode", "torch")
# The stats file's fs.read_sizes buckets (the size the kernel asked for) and
# their names in the breakdown.
READ_SIZES = (("le_4k", "<= 4 KiB"), ("le_32k", "4-32 KiB"), ("le_128k", "32-128 KiB"),
              ("le_512k", "128-512 KiB"), ("le_1m", "512 KiB-1 MiB"), ("gt_1m", "> 1 MiB"))


def cell(xs, fmt="{:.0f}"):
    """benchlib's cell, whole numbers unless told otherwise."""
    return benchlib.cell(xs, fmt)


def bench_rate(r):
    """images/s of a featurefs bench result (its JSON's rate field)."""
    res = r["results"][0]
    for k in ("images_per_s", "images_per_second"):
        if k in res:
            return float(res[k])
    sys.exit(f"report: no images/s in featurefs bench's result: {sorted(res)}")


def bench_images(r):
    res = r["results"][0]
    if "images" in res:
        return int(res["images"])
    sys.exit(f"report: no image count in featurefs bench's result: {sorted(res)}")


def delta(p, *path):
    """A stats figure's change over a pass (after - before)."""
    a, b = p["stats_after"], p["stats_before"]
    for k in path:
        a, b = a.get(k, 0) if isinstance(a, dict) else 0, b.get(k, 0) if isinstance(b, dict) else 0
    return (a or 0) - (b or 0)


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
    n = rounds[0]["tree"]["samples"]
    for i, r in enumerate(rounds):
        for kind in MOUNTS:
            for j, p in enumerate(r[kind]["passes"]):
                if p["samples"] != n:
                    sys.exit(f"report: round {i + 1} {kind} pass {j + 1} read {p['samples']} samples, want {n}")
        if r["torch"]["samples"] != n:
            sys.exit(f"report: round {i + 1} torch read {r['torch']['samples']} images, want {n}")

    def per(f):
        return [f(r) for r in rounds]

    def ms(xs):
        return [1000 * x for x in xs]

    # Epoch 1 through the mount (defaults) and with --prefetch off.
    def rate(kind, i=0):
        return per(lambda r: r[kind]["passes"][i]["samples"] / r[kind]["passes"][i]["seconds"])

    def secs(kind, i):
        return per(lambda r: r[kind]["passes"][i]["seconds"])

    def mcpu(kind, i=0):
        return per(lambda r: r[kind]["passes"][i]["mount_cpu"] / r[kind]["passes"][i]["samples"])

    def pycpu(kind, i=0):
        return per(lambda r: (r[kind]["passes"][i]["python_cpu"] + r[kind]["passes"][i]["children_cpu"])
                   / r[kind]["passes"][i]["samples"])

    x_rate = per(lambda r: bench_rate(r["extract"]))
    x_cpu = per(lambda r: r["extract"]["results"][0]["cpu_seconds"] / bench_images(r["extract"]))
    x_pcpu = per(lambda r: r["extract"]["cpu"] / bench_images(r["extract"]))
    x_wall = per(lambda r: bench_images(r["extract"]) / r["extract"]["wall_seconds"])
    d_rate = per(lambda r: bench_rate(r["decode"]))
    d_cpu = per(lambda r: r["decode"]["results"][0]["cpu_seconds"] / bench_images(r["decode"]))
    t_rate = per(lambda r: r["torch"]["samples"] / r["torch"]["seconds"])
    t_cpu = per(lambda r: r["torch"]["cpu"] / r["torch"]["samples"])
    t_setup = per(lambda r: r["torch"]["setup_seconds"])
    n_ep = len(rounds[0]["tree"]["passes"])

    cpu_ratio = med(mcpu("tree")) / med(x_cpu)
    rate_ratio = med(rate("tree")) / med(t_rate)
    v_cpu = ("met" if cpu_ratio <= TARGET_CPU else "MISSED") if nr >= 3 else f"no verdict from {nr} rounds"
    v_rate = ("met" if rate_ratio >= TARGET_RATE else "MISSED") if nr >= 3 else f"no verdict from {nr} rounds"
    rotation = "; ".join(f"round {i + 1}: {', '.join(o)}" for i, o in enumerate(orders[:3]))
    loads = ", ".join(f"{min(x['load_start'] for x in r.values()):.1f}-{max(x['load_end'] for x in r.values()):.1f}"
                      for r in rounds)

    rows = [
        f"| epoch 1 through the mount (defaults: `--prefetch tree`, `--cache-compression auto`: large features raw), DataLoader 4 workers | "
        f"{cell(rate('tree'))} | {cell(ms(mcpu('tree')), '{:.2f}')} | {cell(ms(pycpu('tree')), '{:.2f}')} |",
        f"| epoch 1 through the mount, `--prefetch off` | {cell(rate('off'))} | {cell(ms(mcpu('off')), '{:.2f}')} | "
        f"{cell(ms(pycpu('off')), '{:.2f}')} |",
        f"| epoch 1 through the mount, `--cache-compression s2` (every feature compressed; the default before) | "
        f"{cell(rate('s2'))} | {cell(ms(mcpu('s2')), '{:.2f}')} | {cell(ms(pycpu('s2')), '{:.2f}')} |",
        f"| extractor alone: `featurefs bench --modes extract` (its own figures, after warm-up; with start-up and warm-up: "
        f"{cell(x_wall)} images/s, {cell(ms(x_pcpu), '{:.2f}')} ms CPU per image) | {cell(x_rate)} | "
        f"{cell(ms(x_cpu), '{:.2f}')} | - |",
        f"| decode + preprocess alone: `featurefs bench --modes decode` (the CPU ceiling) | {cell(d_rate)} | "
        f"{cell(ms(d_cpu), '{:.2f}')} | - |",
        f"| PyTorch: ImageFolder + PIL + the same model in torch, 2 workers (setup {cell(t_setup, '{:.2f}')} s "
        f"not counted) | {cell(t_rate)} | - | {cell(ms(t_cpu), '{:.2f}')} (the whole loader, workers included) |",
    ]
    ep_rows = []
    for kind, name in (("tree", "defaults (`--prefetch tree`)"), ("off", "`--prefetch off`"),
                       ("s2", "`--cache-compression s2`")):
        cols = " | ".join(cell(secs(kind, i), "{:.2f}") for i in range(n_ep))
        cpus = " | ".join(f"{cell(ms(mcpu(kind, i)), '{:.2f}')} | {cell(ms(pycpu(kind, i)), '{:.2f}')} | "
                          f"{cell(per(lambda r: delta(r[kind]['passes'][i], 'fs', 'reads')))}"
                          for i in range(1, n_ep))
        setup = cell(per(lambda r: r[kind]["setup_seconds"]), "{:.2f}")
        ep_rows.append(f"| {name} | {setup} | {cols} | {cpus} |")
    ep_head = " | ".join(f"pass {i + 1} s" for i in range(n_ep))
    ep_cpu_head = " | ".join(f"pass {i + 1} mount CPU ms/image | pass {i + 1} Python CPU ms/image | "
                             f"pass {i + 1} FUSE reads of feature files" for i in range(1, n_ep))

    s2_cpu_ratio = med(mcpu("s2")) / med(x_cpu)

    # The whole machine over epoch 1 (what the cores did), and MinIO's
    # share, where the rounds recorded them.
    machine_note = ""
    if all("machine_busy" in r["tree"]["passes"][0] and "machine_busy" in r["torch"] for r in rounds):
        busy = lambda x: x["machine_busy"] / x["seconds"]
        m_busy = per(lambda r: busy(r["tree"]["passes"][0]))
        t_busy = per(lambda r: busy(r["torch"]))
        io = per(lambda r: r["tree"]["passes"][0]["minio_cpu"] / r["tree"]["passes"][0]["samples"])
        cores = rounds[0]["tree"]["passes"][0]["machine_total"] / rounds[0]["tree"]["passes"][0]["seconds"]
        machine_note = (f"The machine over epoch 1 (/proc/stat, every process): busy {cell(m_busy, '{:.2f}')} of "
                        f"{cores:.0f} cores through the mount (defaults), of which MinIO's server "
                        f"{cell(ms(io), '{:.2f}')} ms of CPU per image (the store the mount reads; the extractor "
                        f"and PyTorch read local files), against {cell(t_busy, '{:.2f}')} cores busy for PyTorch.\n\n")

    def bd(kind, path, scale=1.0, fmt="{:.2f}"):
        return cell(per(lambda r: scale * delta(r[kind]["passes"][0], *path)), fmt)

    breakdown = []
    for label, path, scale, fmt in (
            ("extractions completed", ("extraction", "completed"), 1, "{:.0f}"),
            ("of them by prefetch", ("prefetch", "extracted"), 1, "{:.0f}"),
            ("extractor fetch s (summed over workers)", ("extractor", "fetch_seconds"), 1, "{:.2f}"),
            ("extractor decode + preprocess s (summed)", ("extractor", "decode_seconds"), 1, "{:.2f}"),
            ("extractor inference s (summed)", ("extractor", "infer_seconds"), 1, "{:.2f}"),
            ("extractor batches", ("extractor", "batches"), 1, "{:.0f}"),
            ("cache puts (writes)", ("cache", "puts"), 1, "{:.0f}"),
            ("cache put raw MB", ("cache", "put_raw_bytes"), 1e-6, "{:.0f}"),
            ("cache put stored MB", ("cache", "put_stored_bytes"), 1e-6, "{:.0f}"),
            ("cache compress s", ("cache", "compress_seconds"), 1, "{:.2f}"),
            ("cache decompress s", ("cache", "decompress_seconds"), 1, "{:.2f}"),
            ("cache hits / misses", None, 1, ""),
            ("FUSE reads of feature files", ("fs", "reads"), 1, "{:.0f}"),
            ("FUSE read MB", ("fs", "read_bytes"), 1e-6, "{:.0f}"),
            ("cache partial reads", ("fs", "cache_partial_reads"), 1, "{:.0f}"),
            ("hand-off reads (a feature just computed, from memory)", ("fs", "handoff_reads"), 1, "{:.0f}"),
            ("recent reads (a feature this file's read computed, from memory)", ("fs", "recent_reads"), 1, "{:.0f}"),
            *((f"FUSE READ requests {name}", ("fs", "read_sizes", key), 1, "{:.0f}") for key, name in READ_SIZES),
            ("mount CPU s (stats file `cpu_seconds`)", ("cpu_seconds",), 1, "{:.2f}"),
            ("bytes fetched from the store, MB", ("store", "bytes_fetched"), 1e-6, "{:.0f}")):
        if path is None:  # medians alone: hits / misses
            cols = (" / ".join(f"{med(per(lambda r: delta(r[kind]['passes'][0], 'cache', k))):.0f}"
                               for k in ("hits", "misses")) for kind in MOUNTS)
        else:
            cols = (bd(kind, path, scale, fmt) for kind in MOUNTS)
        breakdown.append(f"| {label} | {' | '.join(cols)} |")
    for label, num, den in (("cache compress MB/s (put raw MB / compress s)", ("cache", "put_raw_bytes"),
                             ("cache", "compress_seconds")),
                            ("cache decompress MB/s (FUSE read MB / decompress s)", ("fs", "read_bytes"),
                             ("cache", "decompress_seconds")),
                            ("mean extraction batch size", ("extractor", "batched_items"), ("extractor", "batches"))):
        def q(kind):
            # n/a where the denominator is 0 in every round (no decompression
            # at all: features served from memory); rounds with 0 are left out.
            scale = 1 if "batch" in label else 1e-6
            xs = [scale * delta(r[kind]["passes"][0], *num) / d for r in rounds
                  if (d := delta(r[kind]["passes"][0], *den)) > 0]
            return cell(xs, "{:.1f}" if scale == 1 else "{:.0f}") if xs else "n/a"
        breakdown.append(f"| {label} | {' | '.join(q(kind) for kind in MOUNTS)} |")
    reads_per_file = med(per(lambda r: delta(r["tree"]["passes"][0], "fs", "reads"))) / n
    whole = [a + b for a, b in zip(mcpu("tree"), pycpu("tree"))]
    max_load = max(max(x["load_start"], x["load_end"]) for r in rounds for x in r.values())
    per_img = lambda kind, *path: 1000 * med(per(lambda r: delta(r[kind]["passes"][0], *path))) / n
    load_note = ""
    if max_load > args.cpus:
        load_note = (f"\n\nThe machine was loaded (1-minute load average up to {max_load:.1f} on {args.cpus} CPUs): each "
                     "path got a share of the cores that depends on how many runnable threads it had against the "
                     "others', so images/s compare loosely; CPU per image is the steadier figure.")
    feat_bytes = med(per(lambda r: delta(r["tree"]["passes"][0], "fs", "read_bytes"))) / n

    print(f"""## Delivery: epoch 1 through the mount vs the extractor alone vs PyTorch, near-free model

The GPU host's stand-in on the CPU (issue 25): a near-free model, one `Conv2d(3, 64, 4, stride=4)` + ReLU (seeded
weights, ONNX opset 17, dynamic batch axis), whose output, 64x56x56 float32 = 802,816 bytes
({feat_bytes:,.0f} bytes per `.npy` file read), is the size of a ResNet-50 layer12 feature: inference costs almost nothing, so
what is measured is the mount's own delivery path. {n} generated JPEGs ({args.classes} classes, {args.image_desc}) in a
local MinIO bucket (the mount reads them from it; the extractor and PyTorch read the local copy). Mount: a fresh mount
and a fresh cache directory per run, `--device cpu`, `DatasetFolder(MOUNT/features/tiny/{args.layer}/train, loader=np.load)`
+ `DataLoader(batch_size=64, shuffle=True, num_workers=4)`, {n_ep} passes. {nr} interleaved rounds in this one run,
each running the six, the order rotating every round ({rotation}{'; and so on' if nr > 3 else ''}).
Figures: the median over the rounds with (min-max). Load average (1 min) over each round: {loads}.
CPU per image: the mount process's utime+stime (/proc/PID/stat) over the pass; the Python side's own rusage plus its
reaped children's (the DataLoader workers); the extractor's and decode's: `featurefs bench`'s own `cpu_seconds` over
its measurement (the process's, after start-up and warm-up). MinIO's CPU is in none of them.

| path (epoch 1) | images/s | mount process CPU ms/image | Python side CPU ms/image |
|---|---|---|---|
{chr(10).join(rows)}

| target (medians of this run) | measured | verdict |
|---|---|---|
| the mount process's CPU per image <= {TARGET_CPU}x the extractor's | **{cpu_ratio:.2f}x** ({med(ms(mcpu('tree'))):.2f} vs {med(ms(x_cpu)):.2f} ms) | {v_cpu} (target <= {TARGET_CPU}x) |
| epoch 1 through the mount >= {TARGET_RATE}x PyTorch's images/s | **{rate_ratio:.2f}x** ({med(rate('tree')):.0f} vs {med(t_rate):.0f} images/s) | {v_rate} (target >= {TARGET_RATE}x) |

The same mount with `--cache-compression s2` (the default before issue 37 item 2): its CPU per image
{s2_cpu_ratio:.2f}x the extractor's ({med(ms(mcpu('s2'))):.2f} ms), epoch 1 {med(rate('s2')) / med(t_rate):.2f}x PyTorch's images/s; the
cache stores {per_img('s2', 'cache', 'put_stored_bytes') / 1e6:.0f} KB per feature with it against
{per_img('tree', 'cache', 'put_stored_bytes') / 1e6:.0f} KB with the default.

{machine_note}CPU per delivered image of the whole path in epoch 1: the mount process plus the Python side {cell(ms(whole), '{:.2f}')} ms
(defaults) against PyTorch's whole loader {cell(ms(t_cpu), '{:.2f}')} ms; the mount's excess over the extractor,
{med(ms(mcpu('tree'))) - med(ms(x_cpu)):.2f} ms per image (medians), against the stats file's cache compress
{per_img('tree', 'cache', 'compress_seconds'):.2f} ms and decompress {per_img('tree', 'cache', 'decompress_seconds'):.2f} ms per image
(wall seconds inside the mount, not CPU seconds: the stats file has no CPU figure per stage).{load_note}

Every pass through the same mount (pass 2 is epoch 2: the kernel's page cache, or the feature cache, serves it; issue 25's
epoch 2 with the defaults was 0.68 s vs 0.25 s with `--prefetch off` for 200 ResNet-50 layer12 features). Setup = mount +
DatasetFolder scan. The Python side's CPU in pass 2 is the DataLoader's own cost (np.load, collate, the workers' hand-off
of 800 KB samples): the ceiling the mount shares the cores with. FUSE reads in a later pass are the requests for pages
the kernel's page cache no longer held (0: the pass came from the page cache alone).

| mount | setup s | {ep_head} | {ep_cpu_head} |
|---|---|{'---|' * n_ep}{'---|---|---|' * (n_ep - 1)}
{chr(10).join(ep_rows)}

The mount's own breakdown over epoch 1 (the stats file, `MOUNT/.featurefs/stats`, after - before the pass; medians with
min-max; seconds summed over the workers, so they can exceed the pass). FUSE reads per feature file (defaults):
{reads_per_file:.1f}.

| figure | defaults (`--prefetch tree`) | `--prefetch off` | `--cache-compression s2` |
|---|---|---|---|
{chr(10).join(breakdown)}

ResNet-50 layer12 and layer18 (where the CPU model dominates) are measured by scripts/bench-epoch.sh
([epoch.md](epoch.md)) and scripts/bench-extract.sh ([extract.md](extract.md)); this section does not repeat them.
""")
    notes = []
    if nr >= 3 and cpu_ratio > TARGET_CPU:
        notes.append(f"- Mount CPU: {cpu_ratio:.2f}x the extractor's per image, short of <= {TARGET_CPU}x: "
                     f"{med(ms(mcpu('tree'))):.2f} ms vs {med(ms(x_cpu)):.2f} ms (decode + preprocess alone "
                     f"{med(ms(d_cpu)):.2f} ms).")
    if nr >= 3 and rate_ratio < TARGET_RATE:
        notes.append(f"- Epoch 1: {rate_ratio:.2f}x PyTorch's images/s, short of {TARGET_RATE}x "
                     f"({med(rate('tree')):.0f} vs {med(t_rate):.0f}; the Python side alone spends "
                     f"{med(ms(pycpu('tree', n_ep - 1))):.2f} ms per image reading from the page cache).")
    if notes:
        print("\n".join(notes))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("export")
    ex.add_argument("--out", required=True)
    mt = sub.add_parser("mount")
    for a in ("--bin", "--model", "--layer", "--endpoint", "--bucket", "--mnt", "--cache-dir", "--log", "--prefetch"):
        mt.add_argument(a, required=True)
    mt.add_argument("--epochs", type=int, default=2)
    mt.add_argument("--flags", default="", help="more mount flags for this run (the s2 kind's --cache-compression s2)")
    mt.add_argument("--workers", type=int, default=4)
    cl = sub.add_parser("cli")
    for a in ("--bin", "--model", "--layer", "--dir"):
        cl.add_argument(a, required=True)
    cl.add_argument("--mode", required=True, choices=["extract", "decode"])
    th = sub.add_parser("torch")
    th.add_argument("--dir", required=True)
    th.add_argument("--workers", type=int, default=2)
    th.add_argument("--threads", type=int, default=2)
    rp = sub.add_parser("report")
    rp.add_argument("--round", action="append", nargs="+", required=True, metavar="KIND=JSON",
                    help="one interleaved round: tree=, off=, s2=, extract=, decode= and torch= JSON files, in the order they ran")
    rp.add_argument("--classes", type=int, default=10)
    rp.add_argument("--layer", default="")
    rp.add_argument("--image-desc", default="")
    rp.add_argument("--cpus", type=int, default=os.cpu_count())
    args = ap.parse_args()
    {"export": cmd_export, "mount": cmd_mount, "cli": cmd_cli, "torch": cmd_torch,
     "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    main()
