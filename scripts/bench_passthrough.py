#!/usr/bin/env python3
"""Benchmark of FUSE passthrough (issue 37 item 4; scripts/bench-passthrough.sh runs it).

A local directory of JPEGs is mounted with the near-free layer12-sized model of
bench_delivery.py (802,944-byte .npy files) and --cache-compression off (so the
cache keeps each feature as a file of its bytes); one mount computes every
feature into the cache. Then ROUNDS interleaved rounds, the order of on/off
rotating, each a fresh mount (fresh kernel inodes: no page cache of the mount)
over that cache, with --passthrough or without:

  readback: the cache's files warm in the page cache (as right after prefetch
            wrote them), every feature file read once (epoch 1's read-back);
  hot:      the same files read again in the same mount (epoch 2 with the
            page cache warm: what the OPEN round trip costs);
  epoch2:   then, in the same mount, page cache dropped (echo 3 >
            /proc/sys/vm/drop_caches), every file read once more;
  restart:  another fresh mount, page cache dropped, every file read once
            (epoch 2 after a remount: every file verified again);

Readers: READERS threads, each file opened, read whole (as np.load does) and
closed. Figures per pass: wall seconds, MB/s, the mount's CPU (utime+stime of
its process, /proc/PID/stat) per file, OPEN requests and READs the mount saw
(its stats file). Prints a markdown section on stdout (make bench keeps it in
docs/bench/passthrough.md; the JSON goes to $BENCH_PT_JSON when set); progress
on stderr. `bench_passthrough.py report RESULT.json` prints the section again.
"""
import argparse
import concurrent.futures
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import drop_caches, files_under, loadavg, med, mount, proc_cpu, read_stats, unmount  # noqa: E402


def mount_cache(args, passthrough, tag):
    """Mount the images over the cache directory (--cache-compression off,
    --prefetch off), with --passthrough or without; returns its pid."""
    return mount([args.bin, "mount", "--model", f"tiny={args.model}", "--cache-dir", args.cache_dir,
                  "--log-file", os.path.join(args.work, f"featurefs-{tag}.log"), "--device", "cpu",
                  "--cache-compression", "off", "--prefetch", "off",
                  "--passthrough=" + ("true" if passthrough else "false"), args.images, args.mnt])


def read_all(paths, readers):
    def one(p):
        with open(p, "rb") as f:
            return len(f.read())
    with concurrent.futures.ThreadPoolExecutor(readers) as ex:
        return sum(ex.map(one, paths))


def one_pass(args, pid, paths, name):
    s0, c0, w0 = read_stats(args.mnt), proc_cpu(pid), time.perf_counter()
    n = read_all(paths, args.readers)
    w1, c1 = time.perf_counter(), proc_cpu(pid)
    s1 = read_stats(args.mnt)
    f0, f1 = s0["fs"], s1["fs"]
    want = len(paths) * args.size
    if n != want:
        sys.exit(f"{name}: read {n} bytes, want {want}")
    res = {"pass": name, "seconds": w1 - w0, "files": len(paths), "mb_s": n / (w1 - w0) / 1e6,
           "mount_cpu_ms_per_file": (c1 - c0) * 1e3 / len(paths),
           "opens": f1["opens"] - f0["opens"], "reads": f1["reads"] - f0["reads"],
           "passthrough_opens": f1.get("passthrough_opens", 0) - f0.get("passthrough_opens", 0),
           "verify_ms_per_file": (f1.get("passthrough_verify_seconds", 0) - f0.get("passthrough_verify_seconds", 0)) * 1e3 / len(paths),
           "load": loadavg()}
    print(f"  {name}: {res['seconds']:.2f}s {res['mb_s']:.0f} MB/s, mount CPU {res['mount_cpu_ms_per_file']:.3f} ms/file, "
          f"opens {res['opens']} reads {res['reads']} passthrough {res['passthrough_opens']}", file=sys.stderr)
    return res


def warm_cache_files(cache_dir):
    for d, _, fs in os.walk(os.path.join(cache_dir, "files")):
        for f in fs:
            with open(os.path.join(d, f), "rb") as fh:
                while fh.read(1 << 20):
                    pass


def main():
    ap = argparse.ArgumentParser()
    for a in ("bin", "model", "images", "mnt", "cache_dir", "work"):
        ap.add_argument("--" + a.replace("_", "-"), required=True)
    ap.add_argument("--layer", default="layer0")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--readers", type=int, default=4)
    ap.add_argument("--size", type=int, default=802944)
    args = ap.parse_args()
    root = lambda: os.path.join(args.mnt, "features", "tiny", args.layer)  # noqa: E731
    # Fill the cache (raw: files of the features' bytes).
    pid = mount_cache(args, False, "fill-off")
    try:
        paths = files_under(root())
        t0 = time.perf_counter()
        read_all(paths, args.readers)
        print(f"fill (off): {len(paths)} features in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        time.sleep(2)  # the cache writes are queued: let them land
    finally:
        unmount(args.mnt, pid)
    results = []
    load0 = loadavg()
    for r in range(args.rounds):
        order = [True, False] if r % 2 == 0 else [False, True]
        for pt in order:
            mode = "on" if pt else "off"
            print(f"round {r + 1}, passthrough {mode}", file=sys.stderr)
            warm_cache_files(args.cache_dir)
            pid = mount_cache(args, pt, f"r{r}-{mode}")
            try:
                paths = files_under(root())
                rb = one_pass(args, pid, paths, "readback")
                hot = one_pass(args, pid, paths, "hot")
                drop_caches()
                e2 = one_pass(args, pid, paths, "epoch2")
            finally:
                unmount(args.mnt, pid)
            pid = mount_cache(args, pt, f"r{r}-{mode}-restart")
            try:
                paths = files_under(root())
                drop_caches()
                rs = one_pass(args, pid, paths, "restart")
            finally:
                unmount(args.mnt, pid)
            for p in (rb, hot, e2, rs):
                p.update(round=r + 1, passthrough=mode)
                results.append(p)
    summary = {}
    for mode in ("on", "off"):
        for name in ("readback", "hot", "epoch2", "restart"):
            rs = [p for p in results if p["passthrough"] == mode and p["pass"] == name]
            if not rs:
                continue
            summary[f"{name}/{mode}"] = {k: (med([p[k] for p in rs]), min(p[k] for p in rs), max(p[k] for p in rs))
                                         for k in ("mb_s", "mount_cpu_ms_per_file", "seconds", "verify_ms_per_file")}
            summary[f"{name}/{mode}"]["opens_reads_pt"] = [(p["opens"], p["reads"], p["passthrough_opens"]) for p in rs]
    res = {"load_before": load0, "load_after": loadavg(), "files": len(paths), "readers": args.readers,
           "kernel": os.uname().release, "summary": summary, "passes": results}
    if os.environ.get("BENCH_PT_JSON"):
        with open(os.environ["BENCH_PT_JSON"], "w") as f:
            json.dump(res, f, indent=1)
    print(report(res))


PASSES = [("readback", "readback: epoch 1's read of features prefetch cached (cache files warm)"),
          ("hot", "hot: the same files again, same mount (everything in memory)"),
          ("epoch2", "epoch2: same mount, `echo 3 > /proc/sys/vm/drop_caches` first"),
          ("restart", "restart: a fresh mount, page cache dropped")]


def report(res):
    """The markdown section make bench keeps in docs/bench/passthrough.md."""
    sm = res["summary"]
    loads = [p["load"] for p in res["passes"]]
    rounds = max(p["round"] for p in res["passes"])

    def cell(key, field, bold=False, fmt="{:,.2f}"):
        if key not in sm:
            return "-"
        m, lo, hi = sm[key][field]
        t = (fmt.format(m) + " (" + fmt.format(lo) + "-" + fmt.format(hi) + ")")
        return f"**{t}**" if bold else t

    rows = []
    for name, text in PASSES:
        on, off = sm.get(f"{name}/on"), sm.get(f"{name}/off")
        cpu_win = on and off and on["mount_cpu_ms_per_file"][0] < off["mount_cpu_ms_per_file"][0]
        mb_win = on and off and on["mb_s"][0] > off["mb_s"][0]
        rows.append(f"| {text} | {cell(name + '/on', 'mount_cpu_ms_per_file', cpu_win)} | "
                    f"{cell(name + '/off', 'mount_cpu_ms_per_file', not cpu_win)} | "
                    f"{cell(name + '/on', 'mb_s', mb_win, '{:,.0f}')} | {cell(name + '/off', 'mb_s', not mb_win, '{:,.0f}')} | "
                    f"{cell(name + '/on', 'verify_ms_per_file')} |")
    return "\n".join([
        "## FUSE passthrough: the mount's CPU per 803 KB feature file, on and off",
        "",
        f"{res['files']} files of 802,944 B from the near-free layer12-sized model of scripts/bench-delivery.sh, "
        f"`--cache-compression off`, {res['readers']} reader threads each opening, reading whole and closing a file "
        f"(1-minute load average {min(loads):.2f}-{max(loads):.2f} during the passes). Each pass is every file once; "
        f"{rounds} rounds, the order of on and off alternating; median (min-max). Mount CPU: utime+stime of its process "
        "(/proc/PID/stat, 10 ms ticks) over the pass, per file; verify: the wall time of the check at open, per file. "
        "Design and verdict: docs/CACHE.md, \"FUSE passthrough\".",
        "",
        "| pass | mount CPU ms/file, on | off | readers' MB/s, on | off | verify ms/file, on |",
        "|---|---|---|---|---|---|",
        *rows,
        ""])


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "report":
        with open(sys.argv[2]) as f:
            print(report(json.load(f)))
    else:
        main()
