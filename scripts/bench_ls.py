#!/usr/bin/python3
"""`ls -l` of one large directory through featurefs mounts vs the local
source directory (scripts/bench-mount.sh runs it).

    /usr/bin/python3 scripts/bench_ls.py --local DIR --mount NAME=DIR [--mount NAME=DIR ...]
        [--rounds 5] [--env TEXT]

Each --mount is a directory of a freshly mounted featurefs (nothing listed
yet): its first `ls -l` (which reads the source's listing) is timed once,
then every directory, the local one included, is listed in --rounds
interleaved rounds (the order rotates each round); the table shows the
medians with min-max, and each mount's ratio to the local directory (the
median of the per-round ratios). `ls -l` runs with LC_ALL=C, output to
/dev/null. --env is what else the text should say of the setup (the
baseline's binary). Prints one markdown section on stdout.
"""
import argparse
import os
import subprocess
import sys
import time

from benchlib import med


def ls_l(path):
    """Seconds one `ls -l path` takes, its output to /dev/null; fails if ls
    does. Not benchlib's ls_l: that one reads the output through a pipe, a
    cost the timing would include."""
    env = dict(os.environ, LC_ALL="C")
    t0 = time.perf_counter()
    subprocess.run(["ls", "-l", path], stdout=subprocess.DEVNULL, check=True, env=env)
    return time.perf_counter() - t0


def count(path):
    return sum(1 for _ in os.scandir(path))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local", required=True)
    ap.add_argument("--mount", action="append", required=True, help="NAME=DIR")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--env", default="", help="the setup the harness's stamp does not record")
    args = ap.parse_args()

    mounts = [m.split("=", 1) for m in args.mount]
    cold = {name: ls_l(d) for name, d in mounts}
    n = count(args.local)
    for name, d in mounts:
        if count(d) != n:
            print(f"bench: {name} lists {count(d)} entries, the local directory {n}", file=sys.stderr)
            return 1
    dirs = [("local", args.local)] + mounts
    runs = {name: [] for name, _ in dirs}
    for i in range(args.rounds):
        k = i % len(dirs)
        for name, d in dirs[k:] + dirs[:k]:
            runs[name].append(ls_l(d))

    def cell(v):
        return f"{med(v):.2f} | {min(v):.2f}-{max(v):.2f}"

    print(f"## Mount: `ls -l` of a directory of {n:,} entries, featurefs vs local disk")
    print()
    print(f"{(args.env + '. ') if args.env else ''}A local-directory source holding {n:,} empty `.jpg` files in one directory, mounted with "
          f"`--prefetch off`; `LC_ALL=C ls -l DIR >/dev/null`. Each mount's first `ls -l` (which reads "
          f"the source's listing) is timed once; then the local directory and the mounts are listed in "
          f"{args.rounds} interleaved rounds, the order rotating each round: medians with min-max, and "
          f"each mount's median per-round ratio to the local directory.")
    print()
    print("| directory | `ls -l` s, median | min-max | first `ls -l` after mounting, s | vs local |")
    print("|---|---:|---:|---:|---|")
    print(f"| local source directory | {cell(runs['local'])} | | baseline |")
    for name, _ in mounts:
        ratios = [m / l for m, l in zip(runs[name], runs["local"])]
        r = med(ratios)
        note = f"**{r:.2f}x local** (target <= 3x)" if name == mounts[0][0] else f"{r:.2f}x local"
        print(f"| {name} | {cell(runs[name])} | {cold[name]:.2f} | {note} |")
    print()
    print("Seconds per round: " + "; ".join(
        f"{name} {', '.join(f'{x:.2f}' for x in runs[name])}" for name, _ in dirs) + ".")
    return 0


if __name__ == "__main__":
    sys.exit(main())
