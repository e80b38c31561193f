#!/usr/bin/env python3
"""--cache-compression auto, per host (issue 49 item 7): scripts/bench-autocompress.sh's runs.

  watch   mount, read every feature file of a layer once (epoch 1), then
          leave the mount idle and record, every --every seconds, the
          cache's disk (CACHE/files, du) and its compactions (the stats
          file) until every feature computed is compacted or --max seconds
          have passed; JSON on stdout.
  report  the markdown section of the runs (part 1: bench_delivery.py
          mount JSONs of two builds; parts 2 and 3: watch JSONs).
"""

import argparse
import json
import os
import shlex
import sys
import time

from benchlib import cell, files_under, loadavg, med, mount, proc_cpu, read_stats, unmount


def du(path):
    """Disk bytes of the regular files under path (their blocks: the
    cache's 256 fan-out directories, 1 MiB, are left out)."""
    n = 0
    for d, _, fs in os.walk(path):
        for f in fs:
            try:
                st = os.lstat(os.path.join(d, f))
            except FileNotFoundError:
                continue  # renamed or removed meanwhile
            n += st.st_blocks * 512
    return n


def cache_stat(st, key):
    return (st.get("cache") or {}).get(key, 0) or 0


def cmd_watch(args):
    load0 = loadavg()
    pid = mount([args.bin, "mount", "--model", f"m={args.model}", "--endpoint-url", args.endpoint,
                 "--cache-dir", args.cache_dir, "--log-file", args.log, "--device", "cpu", *shlex.split(args.flags),
                 f"s3://{args.bucket}", args.mnt])
    out = {"load_start": load0, "samples": []}
    try:
        files = files_under(os.path.join(args.mnt, "features", "m", args.layer, "train"))
        c0, t0 = proc_cpu(pid), time.perf_counter()
        raw = 0
        for p in files:
            with open(p, "rb") as f:
                raw += len(f.read())
        t1, c1 = time.perf_counter(), proc_cpu(pid)
        st = read_stats(args.mnt)
        # wait for the write-behind queue: every feature in the cache
        for _ in range(600):
            if cache_stat(st, "entries") >= len(files):
                break
            time.sleep(0.1)
            st = read_stats(args.mnt)
        out.update({"features": len(files), "raw_bytes": raw, "epoch_seconds": t1 - t0, "epoch_mount_cpu": c1 - c0,
                    "auto_compressed_puts": cache_stat(st, "auto_compressed_puts"),
                    "extract_seconds_per_feature": cache_stat(st, "extract_seconds_per_feature"),
                    "codec_seconds_per_mb": cache_stat(st, "codec_seconds_per_mb")})
        # "when the epoch ended": once the cache holds every feature (the
        # write-behind queue drained), the idle time counted from there
        tw, cw = time.perf_counter(), proc_cpu(pid)
        while True:
            now = time.perf_counter() - tw
            st = read_stats(args.mnt)
            s = {"t": now, "disk": du(os.path.join(args.cache_dir, "files")), "mount_cpu": proc_cpu(pid) - cw,
                 "compactions": cache_stat(st, "compactions"), "abandoned": cache_stat(st, "compactions_abandoned")}
            out["samples"].append(s)
            print(f"  t={now:.0f}s disk {s['disk'] / 1e6:.1f} MB, {s['compactions']} compacted", file=sys.stderr)
            done = s["compactions"] + out["auto_compressed_puts"] >= len(files)
            if done or now >= args.max:
                break
            time.sleep(args.every)
    finally:
        unmount(args.mnt, pid)
    out["load_end"] = loadavg()
    json.dump(out, sys.stdout)


def cmd_report(args):
    arms = {"off": [], "auto": []}
    for spec in args.round:
        for kv in spec:
            kind, path = kv.split("=", 1)
            with open(path) as f:
                arms[kind].append(json.load(f))
    n = len(arms["auto"])

    def rate(r):
        p = r["passes"][0]
        return p["samples"] / p["seconds"]

    def cpu_ms(r):
        p = r["passes"][0]
        return 1e3 * p["mount_cpu"] / p["samples"]

    def disk(r):
        return r["disk_bytes"] / r["samples"]

    print(f"{args.env}.\n")
    print(f"**Part 1: epoch 1 of the near-free model** (scripts/bench-delivery.sh's CPU stand-in for a GPU host: a "
          f"Conv2d whose output is a layer12-sized 802,944-byte feature; {arms['auto'][0]['samples']} JPEGs in MinIO, "
          f"DataLoader(batch_size=64, shuffle, num_workers=4) over a fresh mount and cache, `--prefetch tree`, "
          f"defaults otherwise), {n} interleaved rounds, the order alternating. Medians (min-max).\n")
    print("| `--cache-compression` | epoch 1 images/s | the mount's CPU ms/image | cache disk bytes/feature after epoch 1 |")
    print("|---|---|---|---|")
    for kind, name in (("off", "off: every feature raw"), ("auto", "auto (the default): by measurement")):
        rs = arms[kind]
        print(f"| {name} | {cell([rate(r) for r in rs], '{:.0f}')} | {cell([cpu_ms(r) for r in rs])} | "
              f"{cell([disk(r) for r in rs], '{:.0f}')} |")
    ratios = [rate(a) / rate(b) for a, b in zip(arms["auto"], arms["off"])]
    cratios = [cpu_ms(a) / cpu_ms(b) for a, b in zip(arms["auto"], arms["off"])]
    verdict = "met" if med(ratios) >= 0.98 else "missed"
    print(f"\nPer round, `auto`'s images/s over `off`'s: {cell(ratios, '{:.3f}')} (target >= 0.98: {verdict}); "
          f"the mount's CPU per image: {cell(cratios, '{:.3f}')}.\n")
    for label, path in (("Part 2: the same mount left idle after epoch 1", args.idle),
                        ("Part 3: a CPU host", args.cpuhost)):
        if not path:
            continue
        with open(path) as f:
            w = json.load(f)
        ss = w["samples"]
        first = ss[0]["disk"] / w["features"]
        last = ss[-1]
        done = next((s for s in ss if s["compactions"] + w["auto_compressed_puts"] >= w["features"]), None)
        print(f"**{label}** ({w['features']} features of {w['raw_bytes'] // w['features']:,} bytes read once, "
              f"epoch {w['epoch_seconds']:.1f} s; the auto policy measured an extraction of "
              f"{1e3 * w['extract_seconds_per_feature']:.2f} ms per feature and zeros-elision at "
              f"{1e3 * w['codec_seconds_per_mb']:.2f} ms of CPU per MB; {w['auto_compressed_puts']} features compressed "
              f"on the write path): cache files {first:,.0f} bytes per feature when the epoch ended, "
              f"{last['disk'] / w['features']:,.0f} after {last['t']:.0f} s idle "
              f"({last['compactions']} compacted, {last['abandoned']} abandoned"
              + (f"; all compacted {done['t']:.0f} s after the epoch ended, the mount's CPU meanwhile "
                 f"{1e3 * done['mount_cpu'] / max(done['compactions'], 1):.2f} ms per file compacted" if done and done["compactions"] else "")
              + f"); load {w['load_start']} before, {w['load_end']} after.\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("watch")
    for a in ("--bin", "--model", "--layer", "--endpoint", "--bucket", "--mnt", "--cache-dir", "--log"):
        w.add_argument(a, required=True)
    w.add_argument("--flags", default="")
    w.add_argument("--max", type=float, default=300)
    w.add_argument("--every", type=float, default=2)
    rp = sub.add_parser("report")
    rp.add_argument("--round", nargs="+", action="append", required=True, metavar="KIND=FILE")
    rp.add_argument("--env", required=True)
    rp.add_argument("--idle", default="")
    rp.add_argument("--cpuhost", default="")
    args = ap.parse_args()
    {"watch": cmd_watch, "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    main()
