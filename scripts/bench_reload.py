#!/usr/bin/python3
"""Reads timed through a model reload (scripts/bench-reload.sh).

Each round, on one mounted model whose file MODEL is replaced by a rename:
  1. two cold layer4 reads (features not extracted before): the first is
     the round's first extraction of layer4 (after the previous round's
     reload: layer4's digest is unchanged, so it runs on the session and
     batch size the previous version's reads made); the second, one
     extraction on an open session, is one batch, the most a read may wait
     for the reload;
  2. one thread reads the warm layer4 files in a loop, timing every read
     (the file's pages are dropped with posix_fadvise before each read, so
     every read reaches the mount: its cache, not the kernel's pages);
     --baseline seconds of it are the baseline window;
  3. the next version's file is copied next to MODEL and renamed over it;
     the reader keeps reading until the mount logs its next "model reloaded"
     line and --after seconds more: the reload window;
  4. every read must succeed and return the bytes it returned before the
     swap (layer4's digest does not change between the versions: a read of
     other bytes is a mixed or wrong file).
A second thread sleeps 1 ms in a loop and records how much longer each
sleep took: the machine's own stalls in the same windows, a control.
Rounds alternate the versions (A->B, B->A, ...). Prints one markdown
section on stdout; --json FILE keeps the raw figures.
"""
import argparse
import datetime
import json
import os
import re
import shutil
import sys
import threading
import time

from benchlib import cell, med


def read_timed(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        t = time.perf_counter()
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
        return time.perf_counter() - t, b"".join(chunks)
    finally:
        os.close(fd)


def go_duration(s):
    """Seconds in a Go time.Duration string (1.5s, 850.2ms, 1m2.5s)."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    total = 0.0
    for num, unit in re.findall(r"([0-9.]+)(h|ms|us|µs|ns|m|s)", s):
        total += float(num) * units[unit]
    return total


def reload_lines(log):
    """The mount log's "model reloaded" lines as (wall time, load seconds)."""
    out = []
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            for line in f:
                if "model reloaded" not in line:
                    continue
                tm = re.search(r"time=(\S+)", line)
                took = re.search(r"took=(\S+)", line)
                if not (tm and took):
                    continue
                ts = datetime.datetime.fromisoformat(tm.group(1).replace("Z", "+00:00")).timestamp()
                out.append((ts, go_duration(took.group(1))))
    except FileNotFoundError:
        pass
    return out


def one_round(args, r, warm, expect, cold, versions):
    res = {"round": r + 1, "from": os.path.basename(versions[r % 2]), "to": os.path.basename(versions[(r + 1) % 2])}
    res["first_cold_read_s"] = read_timed(cold[0])[0]
    res["cold_read_s"] = read_timed(cold[1])[0]

    reads = []  # (wall start, seconds, ok)
    stop = threading.Event()

    def reader():
        i = 0
        while not stop.is_set():
            p = warm[i % len(warm)]
            i += 1
            t0 = time.time()
            try:
                d, b = read_timed(p)
                reads.append((t0, d, b == expect[p]))
            except OSError:
                reads.append((t0, time.time() - t0, None))

    naps = []  # (wall start, seconds over 1 ms): the machine's own stalls

    def napper():
        while not stop.is_set():
            t0 = time.time()
            time.sleep(0.001)
            naps.append((t0, time.time() - t0 - 0.001))

    th, probe = threading.Thread(target=reader), threading.Thread(target=napper)
    before = len(reload_lines(args.log))
    th.start()
    probe.start()
    time.sleep(args.baseline)
    tmp = args.model + ".next"
    shutil.copyfile(versions[(r + 1) % 2], tmp)
    swap = time.time()
    os.replace(tmp, args.model)
    deadline = swap + args.timeout
    while len(reload_lines(args.log)) <= before:
        if time.time() > deadline:
            stop.set()
            th.join()
            probe.join()
            raise SystemExit(f"bench_reload: no 'model reloaded' line {args.timeout}s after the rename (round {r + 1})")
        time.sleep(0.05)
    logged, took = reload_lines(args.log)[before]
    time.sleep(args.after)
    stop.set()
    th.join()
    probe.join()
    end = logged + args.after
    base = [d for t0, d, ok in reads if swap - args.baseline <= t0 and t0 + d < swap]
    during = [d for t0, d, ok in reads if t0 + d >= swap and t0 <= end]
    load = [d for t0, d, ok in reads if t0 + d >= logged - took and t0 <= logged]
    worst = max((x for x in reads if x[0] + x[1] >= swap and x[0] <= end), key=lambda x: x[1])
    res["nap_baseline_max_s"] = max(d for t0, d in naps if swap - args.baseline <= t0 and t0 + d < swap)
    res["nap_reload_max_s"] = max(d for t0, d in naps if t0 + d >= swap and t0 <= end)
    res["worst_at_s"] = worst[0] - (logged - took)  # its start, from the load's start
    res.update(
        baseline_reads=len(base), baseline_max_s=max(base), baseline_median_s=med(base),
        reload_reads=len(during), reload_max_s=max(during), reload_median_s=med(during),
        load_reads=len(load), load_max_s=max(load) if load else 0.0,
        load_s=took, detect_s=logged - took - swap,
        failed=sum(1 for _, _, ok in reads if ok is None), mixed=sum(1 for _, _, ok in reads if ok is False),
        reads=len(reads),
    )
    return res


def ms(xs):
    """A cell of seconds, in milliseconds: median (min-max)."""
    return cell([x * 1000 for x in xs], "{:.1f} ms")


def ratio(xs):
    return cell(xs, "{:.2f}x")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layer", required=True, help="the mount's layer4 directory of the warm files")
    ap.add_argument("--warm", nargs="+", required=True, help="warm feature files (relative to --layer)")
    ap.add_argument("--cold", nargs="+", required=True, help="two cold feature files per round (relative to --layer)")
    ap.add_argument("--model", required=True, help="the mounted model file, replaced by renames")
    ap.add_argument("--versions", nargs=2, required=True, help="the mounted version, then the next")
    ap.add_argument("--log", required=True, help="the mount's --log-file")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", type=float, default=5.0, help="seconds of the baseline window")
    ap.add_argument("--after", type=float, default=1.0, help="seconds read after the reload's log line")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--json")
    args = ap.parse_args()
    if len(args.cold) < 2 * args.rounds:
        raise SystemExit("bench_reload: want two --cold files per round")
    warm = [os.path.join(args.layer, w) for w in args.warm]
    expect = {p: read_timed(p)[1] for p in warm}
    rounds = []
    for r in range(args.rounds):
        res = one_round(args, r, warm, expect, [os.path.join(args.layer, c) for c in args.cold[2 * r:2 * r + 2]], args.versions)
        rounds.append(res)
        print(f"bench-reload: round {r + 1}/{args.rounds}: {json.dumps(res)}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rounds, f, indent=1)

    g = lambda k: [x[k] for x in rounds]  # noqa: E731
    vs_base = [x["reload_max_s"] / x["baseline_max_s"] for x in rounds]
    vs_batch = [x["reload_max_s"] / x["cold_read_s"] for x in rounds]
    failed, mixed = sum(g("failed")), sum(g("mixed"))
    # "No read waits more than one batch": a bound on every read, so the
    # verdict takes the worst round, not the median.
    met = max(vs_batch) <= 1.0 and failed == 0 and mixed == 0
    print("## Model reload under reads")
    print()
    print(f"One thread reads {len(warm)} warm ResNet-50 layer4 files in a loop through a `--device cpu --prefetch off`")
    print("mount, timing every read (each file's pages dropped first, so each read reaches the mount). The model file")
    print("is replaced by a rename with a version whose layer4 digest is the same (base.onnx and layer4fc.onnx of")
    print("scripts/export_versions.py, alternating each round); the mount reloads it off the read path. Baseline")
    print(f"window: {args.baseline:g} s before the rename; reload window: from the rename until {args.after:g} s after the")
    print("mount's `model reloaded` line. One batch: a cold layer4 read (one extraction, its session open) in the")
    print("same round, before the baseline window.")
    print(f"{len(rounds)} interleaved rounds; median (min-max).")
    print()
    print("| figure | median (min-max) |")
    print("|---|---|")
    print(f"| longest read, baseline window | {ms(g('baseline_max_s'))} |")
    print(f"| longest read, reload window | {ms(g('reload_max_s'))} |")
    print(f"| longest read overlapping the load itself | {ms(g('load_max_s'))} |")
    print(f"| **longest read, reload / baseline window** | **{ratio(vs_base)}** |")
    print(f"| control: longest oversleep of a 1 ms sleep loop in this process, baseline window | {ms(g('nap_baseline_max_s'))} |")
    print(f"| control: the same, reload window (the machine's stalls, not the mount's) | {ms(g('nap_reload_max_s'))} |")
    print(f"| when the reload window's longest read starts, from the load's start | {ms(g('worst_at_s'))} |")
    print(f"| the reload's load time (`took` of its log line) | {ms(g('load_s'))} |")
    print(f"| longest read overlapping the load / the load time | {ratio([x['load_max_s'] / x['load_s'] for x in rounds])} |")
    print(f"| rename to the load's start (the 2 s watcher, one stable interval) | {ms(g('detect_s'))} |")
    print(f"| one batch: a cold layer4 read | {ms(g('cold_read_s'))} |")
    print(f"| the round's first cold layer4 read (rounds 2+: the first after a reload; layer4's digest is unchanged, so its session is kept) | {ms(g('first_cold_read_s')[1:] or g('first_cold_read_s'))} |")
    print(f"| **longest read in the reload window / one batch** | **{ratio(vs_batch)}** |")
    print(f"| **worst round: longest read in the reload window / one batch** | **{max(vs_batch):.2f}x** (target <= 1.00x) |")
    print(f"| reads per round (baseline window, reload window) | {cell(g('baseline_reads'), '{}')}, {cell(g('reload_reads'), '{}')} |")
    print(f"| failed reads, all rounds | **{failed}** of {sum(g('reads'))} |")
    print(f"| reads of other bytes than before the swap (mixed), all rounds | **{mixed}** |")
    print()
    stalled = sum(1 for v in vs_batch if v > 1.0)
    print(f"Verdict: no read waits more than one batch for the reload: **{'met' if met else 'MISSED'}** (the worst round's")
    print(f"longest read of the reload window is {max(vs_batch):.2f}x that round's cold layer4 read, the median round's")
    print(f"{med(vs_batch):.2f}x; {stalled} of {len(rounds)} rounds over 1.00x; {failed} failed, {mixed} mixed reads).")


if __name__ == "__main__":
    main()
