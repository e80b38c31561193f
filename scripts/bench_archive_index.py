"""Helper of scripts/bench-archive-index.sh (issue 36 items 7 and 8): one
tar of N members and the same names as plain files in a local directory, a
mount's first listing of each, its peak RSS (VmHWM) and stats.

  tree   --out DIR --members N --names short|long
         DIR/tar/big/data.tar (N members, 1-byte contents) and
         DIR/plain/big/data/... (the same paths as empty files); prints the
         directory to list under the layer, relative to big/.
  ls     --dir D --pid PID --mnt MNT: a first os.listdir of D (and a
         second), the mount's VmHWM and VmRSS, stats.
  report --rounds F...: the markdown section's figures (F: NAMES/rR-KIND.json,
         the files run_rounds names in a directory per name form).
"""

import argparse
import io
import json
import os
import sys
import tarfile
import time

from benchlib import cell, loadavg, med, proc_status, read_stats

TARGET_TIME = 2.0  # tar listing <= 2x the plain directory's
SLACK_MIB = 64     # peak RSS of the tar listing <= the plain one's + index_bytes + this


def member_paths(n, names):
    if names == "short":
        return "", [f"n{i:07d}.jpg" for i in range(n)]
    # 800-byte paths: three 180-byte directories and a 257-byte base.
    dirs = "/".join(c * 180 for c in "abc")
    return dirs, [f"{'x' * 240}{i:07d}.jpg" for i in range(n)]


def cmd_tree(args):
    sub, bases = member_paths(args.members, args.names)
    tdir = os.path.join(args.out, "tar", "big")
    pdir = os.path.join(args.out, "plain", "big", "data", sub)
    os.makedirs(tdir, exist_ok=True)
    os.makedirs(pdir, exist_ok=True)
    with tarfile.open(os.path.join(tdir, "data.tar"), "w", format=tarfile.PAX_FORMAT) as tf:
        for b in bases:
            ti = tarfile.TarInfo((sub + "/" if sub else "") + b)
            ti.size = 1
            tf.addfile(ti, io.BytesIO(b"x"))
    for b in bases:
        open(os.path.join(pdir, b), "wb").close()
    print(os.path.join("data", sub) if sub else "data")


def cmd_ls(args):
    load0 = loadavg()
    out = {"load_start": load0}
    t0 = time.perf_counter()
    n = len(os.listdir(args.dir))
    out["first"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    os.listdir(args.dir)
    out["second"] = time.perf_counter() - t0
    out["entries"] = n
    out["hwm_kib"] = proc_status(args.pid, "VmHWM") // 1024
    out["rss_kib"] = proc_status(args.pid, "VmRSS") // 1024
    st = read_stats(args.mnt)
    fs = st.get("fs", {})
    out["metadata_bytes"] = fs.get("metadata_bytes", 0)
    out["metadata_max_bytes"] = fs.get("metadata_max_bytes", 0)
    out["archives"] = st.get("archives", {})
    out["load_end"] = loadavg()
    json.dump(out, sys.stdout)


def cmd_report(args):
    rows = {}
    loads = []
    for p in args.rounds:
        names, kind = os.path.basename(os.path.dirname(p)), os.path.basename(p)[:-5].split("-", 1)[1]
        with open(p) as f:
            r = json.load(f)
        rows.setdefault((names, kind), []).append(r)
        loads += [r["load_start"], r["load_end"]]
    f = lambda rs, k: [r[k] for r in rs]  # noqa: E731
    m = lambda rs, k: [r[k] / 1048576 for r in rs]  # noqa: E731
    k = lambda rs, k: [r[k] / 1024 for r in rs]  # noqa: E731
    print(f"Load average (1 min) over the runs: {min(loads):.1f}-{max(loads):.1f}.\n")
    print("| names | figure | plain files | tar | tar / plain |")
    print("|---|---|---|---|---|")
    verdicts = []
    for names in ("short", "long"):
        if (names, "tar") not in rows:
            continue
        rp, rt = rows[(names, "plain")], rows[(names, "tar")]
        ratios = [t["first"] / p["first"] for p, t in zip(rp, rt)]
        label = "short (12 bytes)" if names == "short" else "long (800 bytes)"
        print(f"| {label} | entries | {rp[0]['entries']} | {rt[0]['entries']} | |")
        print(f"| {label} | first listing, s | {cell(f(rp, 'first'))} | {cell(f(rt, 'first'))} | {cell(ratios)}x |")
        print(f"| {label} | second listing, s | {cell(f(rp, 'second'))} | {cell(f(rt, 'second'))} | |")
        print(f"| {label} | peak RSS (VmHWM), MiB | {cell(k(rp, 'hwm_kib'), '{:.0f}')} | {cell(k(rt, 'hwm_kib'), '{:.0f}')} | |")
        print(f"| {label} | RSS after, MiB | {cell(k(rp, 'rss_kib'), '{:.0f}')} | {cell(k(rt, 'rss_kib'), '{:.0f}')} | |")
        print(f"| {label} | stats metadata_bytes, MiB | {cell(m(rp, 'metadata_bytes'), '{:.1f}')} | {cell(m(rt, 'metadata_bytes'), '{:.1f}')} | |")
        ib = [r.get("archives", {}).get("index_bytes", 0) / 1048576 for r in rt]
        print(f"| {label} | stats archives.index_bytes, MiB | | {cell(ib, '{:.1f}')} | |")
        over = [(t["hwm_kib"] - p["hwm_kib"]) / 1024 for p, t in zip(rp, rt)]
        print(f"| {label} | peak RSS over the plain listing's, MiB | | {cell(over, '{:.0f}')} | |")
        verdicts.append((label, med(ratios), med(f(rt, 'first')), med(f(rp, 'first')), med(over), med(ib)))
    print()
    print("| target (medians of this run) | measured | verdict |")
    print("|---|---|---|")
    for label, r, t, p, over, ib in verdicts:
        ok = "met" if r <= TARGET_TIME else "NOT met"
        print(f"| first listing of the tar <= {TARGET_TIME:.0f}x the plain directory's, {label} | **{r:.2f}x** ({t:.2f} vs {p:.2f} s) | {ok} |")
        ok = "met" if over <= ib + SLACK_MIB else "NOT met"
        print(f"| peak RSS of the tar listing <= the plain one's + archives.index_bytes (counted in fs.metadata_bytes) + {SLACK_MIB} MiB, {label} | **+{over:.0f} MiB** (index {ib:.1f} MiB) | {ok} |")


def main():
    ap = argparse.ArgumentParser()
    sp = ap.add_subparsers(dest="cmd", required=True)
    t = sp.add_parser("tree")
    t.add_argument("--out", required=True)
    t.add_argument("--members", type=int, required=True)
    t.add_argument("--names", choices=("short", "long"), required=True)
    t.set_defaults(f=cmd_tree)
    s = sp.add_parser("ls")
    s.add_argument("--dir", required=True)
    s.add_argument("--pid", required=True)
    s.add_argument("--mnt", required=True)
    s.set_defaults(f=cmd_ls)
    r = sp.add_parser("report")
    r.add_argument("--rounds", nargs="+", required=True)
    r.set_defaults(f=cmd_report)
    a = ap.parse_args()
    a.f(a)


if __name__ == "__main__":
    main()
