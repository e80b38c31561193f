"""The mount's memory over warming two ResNet-50 layers and reading them
twice (issue 49 item 6; scripts/bench-memory.sh runs it).

    bench_memory.py --arm NAME=BIN [--arm ...] --model M.onnx --data DIR
                    [--limit 512MiB --limit 1GiB --limit 0] [--rounds 3]

Each round runs every (limit, arm) once, the arms' order rotating: a fresh
mount (--device cpu, a fresh cache, --memory-limit LIMIT unless 0, the
defaults otherwise: --prefetch tree) reads every .npy file of layer12 and
layer18 under it, twice; /proc/PID/status is sampled every second (VmRSS)
and at the end (VmHWM), and the stats file's memory section read after the
epochs. Prints a markdown section on stdout, progress on stderr."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

from benchlib import cell, loadavg, med, proc_status, read_stats, unmount

LAYERS = ("layer12", "layer18")


def one(binp, model, data, limit):
    mnt = tempfile.mkdtemp(prefix="bench-memory-mnt-")
    cache = tempfile.mkdtemp(prefix="bench-memory-cache-")
    args = [binp, "mount", "--model", f"resnet50={model}", "--cache-dir", cache, "--device", "cpu",
            "--log-file", os.path.join(cache, "log")]
    if limit != "0":
        args += ["--memory-limit", limit]
    r = subprocess.run(args + [data, mnt], capture_output=True, text=True)
    if r.returncode != 0:
        return {"refused": r.returncode, "stderr": r.stderr.strip()}
    pid = int(re.search(r"\(pid (\d+),", r.stderr).group(1))
    trace, stop = [], threading.Event()

    def sample():
        t0 = time.time()
        while not stop.is_set():
            try:
                trace.append((round(time.time() - t0), proc_status(pid, "VmRSS")))
            except OSError:
                return
            stop.wait(1.0)

    th = threading.Thread(target=sample)
    th.start()
    load0 = loadavg()
    t0 = time.perf_counter()
    files = []
    for layer in LAYERS:
        for root, _, names in os.walk(os.path.join(mnt, "features", "resnet50", layer)):
            files += [os.path.join(root, n) for n in names if n.endswith(".npy")]
    for _ in range(2):
        for f in files:
            with open(f, "rb") as fh:
                fh.read()
    secs = time.perf_counter() - t0
    mem = read_stats(mnt)["memory"]
    out = {"files": len(files), "seconds": secs, "hwm": proc_status(pid, "VmHWM"), "rss": proc_status(pid, "VmRSS"),
           "c_heap_free": mem.get("c_heap_free_bytes", 0), "c_heap_in_use": mem.get("c_heap_in_use_bytes", 0),
           "session_bytes": mem.get("session_bytes"), "busy_trims": mem.get("busy_trims"),
           "go_heap_objects": mem.get("go_heap_objects_bytes", 0), "load": (load0 + loadavg()) / 2}
    stop.set()
    th.join()
    out["trace"] = trace
    out["trace_max"] = max(r for _, r in trace) if trace else 0
    unmount(mnt, pid)
    subprocess.run(["rm", "-rf", cache, mnt], check=False)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arm", action="append", required=True, help="NAME=BIN")
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--limit", action="append", help="--memory-limit values (0: none)")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    arms = [x.split("=", 1) for x in a.arm]
    limits = a.limit or ["512MiB", "1GiB", "0"]
    res = {(l, n): [] for l in limits for n, _ in arms}
    for r in range(a.rounds):
        for limit in limits:
            order = arms[r % len(arms):] + arms[:r % len(arms)]
            for name, binp in order:
                o = one(binp, a.model, a.data, limit)
                res[(limit, name)].append(o)
                print(f"round {r + 1} limit {limit} {name}: "
                      + json.dumps({k: v for k, v in o.items() if k != "trace"}), file=sys.stderr)
    mib = lambda x: x / 2**20
    print("| --memory-limit | arm | peak RSS (VmHWM), MiB | max of the 1 s RSS trace, MiB | RSS after the epochs, MiB "
          "| C heap free after, MiB | sessions, MiB | reads, s | load |")
    print("|---|---|---|---|---|---|---|---|---|")
    for limit in limits:
        for name, _ in arms:
            rs = [o for o in res[(limit, name)] if "hwm" in o]
            if not rs:
                print(f"| {limit} | {name} | refused: {res[(limit, name)][0].get('stderr', '')} | | | | | | |")
                continue
            sess = [mib(o["session_bytes"]) for o in rs if o.get("session_bytes") is not None]
            print(f"| {limit if limit != '0' else 'none (defaults)'} | {name} "
                  f"| {cell([mib(o['hwm']) for o in rs], '{:.0f}')} | {cell([mib(o['trace_max']) for o in rs], '{:.0f}')} "
                  f"| {cell([mib(o['rss']) for o in rs], '{:.0f}')} | {cell([mib(o['c_heap_free']) for o in rs], '{:.0f}')} "
                  f"| {cell(sess, '{:.0f}') if sess else '-'} | {cell([o['seconds'] for o in rs], '{:.1f}')} "
                  f"| {cell([o['load'] for o in rs], '{:.1f}')} |")
    print()
    units = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
    for limit in limits:
        m = re.fullmatch(r"(\d+)([KMG]iB)", limit)
        if not m:
            continue
        cap = int(m.group(1)) * units[m.group(2)]
        for name, _ in arms:
            hw = [o["hwm"] for o in res[(limit, name)] if "hwm" in o]
            if hw:
                print(f"- Target: peak RSS (VmHWM) <= {limit} under `--memory-limit {limit}` ({name}): "
                      f"median {mib(med(hw)):.0f} MiB, the highest round {mib(max(hw)):.0f}: "
                      f"**{'met' if med(hw) <= cap else 'missed'}**.")
    print()
    print("Traces (VmRSS in MiB, one sample a second), first round:")
    print()
    for limit in limits:
        for name, _ in arms:
            o = res[(limit, name)][0]
            if "trace" in o:
                print(f"- {limit} {name}: " + " ".join(str(round(mib(v))) for _, v in o["trace"]))


if __name__ == "__main__":
    main()
