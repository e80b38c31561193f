#!/usr/bin/env python3
"""The split benchmark's stage table: the cost model's per-sample stage
estimates of every run against each side's CPU time per sample, measured
over the run's window (test/split_bench_test.go prints one progress line
per run; scripts/bench-split.sh keeps them and calls this).

    scripts/split_stages.py < progress-lines    (markdown on stdout)
    scripts/split_stages.py --summary < progress-lines

--summary prints instead the table the benchmark's own section opens with
(per configuration: auto's split and samples/s against the best fixed
split's, the ratio, and the targets' two lines), for a run whose section
was lost (its script stopped before printing it) but whose progress lines
were kept.

Per configuration and policy, the medians over its rounds of: samples/s,
the predicted samples/s, the predicted server, wire and client ms per
sample, and the measured storage and trainer CPU ms per sample (user +
system) as wall time on that side (CPU time divided by the side's cores:
its quota, or 1). A stage the model gets right has measured near
predicted; the slowest stage bounds the throughput.
"""
import re
import sys

from benchlib import med

LINE = re.compile(
    r"splitbench: storage (?P<cores>\S+) cores, (?P<model>\S+) layer(?P<freeze>\d+) (?P<mbit>\d+) Mbit/s "
    r"\(probed (?P<probed>[\d.]+)\) (?P<policy>\S+): split (?P<split>\S+), (?P<rate>[\d.]+) samples/s "
    r"\(predicted (?P<pred>[\d.]+)\), (?P<payload>[\d.]+) payload and (?P<link>[\d.]+) link bytes per sample, "
    r"settled in (?P<settle>[\d.]+) s; ms per sample: storage CPU (?P<su>[\d.]+)\+(?P<ss>[\d.]+), "
    r"trainer CPU (?P<tu>[\d.]+)\+(?P<ts>[\d.]+) \(user\+system\), "
    r"predicted server (?P<ps>[\d.]+) wire (?P<pw>[\d.]+) client (?P<pc>[\d.]+)")


def main():
    summary = sys.argv[1:] == ["--summary"]
    if sys.argv[1:] and not summary:
        sys.exit("usage: split_stages.py [--summary] < progress-lines")
    runs = {}  # (cores, model, freeze, mbit, policy): its runs, in the order of the lines
    for ln in sys.stdin:
        m = LINE.search(ln)
        if not m:
            continue
        d = m.groupdict()
        runs.setdefault((d["cores"], d["model"], int(d["freeze"]), int(d["mbit"]), d["policy"]), []).append(d)
    if not runs:
        sys.exit("split_stages: no progress lines with stage figures on stdin")
    if summary:
        print_summary(runs)
        return
    print("| storage cores | model | freeze | link | policy | split | samples/s | predicted/s "
          "| server ms: predicted, measured | wire ms: predicted, at the link's rate | client ms: predicted, measured | rounds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (cores, model, freeze, mbit, policy), rs in runs.items():
        share = float(cores) if cores != "all" else 1.0
        server = med_of(rs, lambda r: (float(r["su"]) + float(r["ss"])) / share)
        client = med_of(rs, lambda r: float(r["tu"]) + float(r["ts"]))
        wire = med_of(rs, lambda r: float(r["payload"]) * 8 / (mbit * 1e6) * 1e3)
        splits = sorted({r["split"] for r in rs})
        print(f"| {cores} | {model} | layer{freeze} | {mbit} Mbit/s | {policy} | {'/'.join(splits)} "
              f"| {med_of(rs, 'rate'):.2f} | {med_of(rs, 'pred'):.2f} "
              f"| {med_of(rs, 'ps'):.1f}, {server:.1f} | {med_of(rs, 'pw'):.1f}, {wire:.1f} "
              f"| {med_of(rs, 'pc'):.1f}, {client:.1f} | {len(rs)} |")


def med_of(rs, f):
    """The median over the runs rs of f(run), or of the field f read as a number."""
    return med([float(r[f]) if isinstance(f, str) else f(r) for r in rs])


def print_summary(runs):
    configs = list(dict.fromkeys(key[:4] for key in runs))
    print("| storage cores | model | freeze | link | auto: split(s), samples/s (runs) | best fixed: split, samples/s "
          "| auto ÷ best | raw samples/s | auto ÷ raw | predicted samples/s: auto's split, best fixed's |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    within = total = 0
    picked = picked_within = 0
    worst = float("inf")
    for cores, model, freeze, mbit in configs:
        pols = {k[4]: rs for k, rs in runs.items() if k[:4] == (cores, model, freeze, mbit)}
        if "auto" not in pols or len(pols) < 2:
            continue
        rate = {p: med_of(rs, "rate") for p, rs in pols.items()}
        best = max((p for p in pols if p != "auto"), key=lambda p: rate[p])
        raw = rate.get("raw", 0)
        ratio = rate["auto"] / rate[best]
        total += 1
        within += ratio >= 0.95
        worst = min(worst, ratio)
        auto = pols["auto"]
        chosen = auto[0]["split"]
        if chosen in pols:
            picked += 1
            picked_within += rate[chosen] / rate[best] >= 0.95
        splits = "/".join(dict.fromkeys(r["split"] for r in auto))
        rs = ", ".join(r["rate"] for r in auto)
        print(f"| {cores} | {model} | layer{freeze} | {mbit} Mbit/s | {splits}, {rate['auto']:.2f} ({rs}) "
              f"| {pols[best][0]['split']}, {rate[best]:.2f} | {ratio:.2f} | {raw:.2f} | {rate['auto'] / raw:.2f}x "
              f"| {med_of(auto, 'pred'):.2f}, {med_of(pols[best], 'pred'):.2f} |")
    pct = 100 * within / max(1, total)
    met = lambda ok: "met" if ok else "NOT met"
    print()
    print(f"auto within 5% of the best fixed split: {within} of {total} configurations ({pct:.0f}%; "
          f"target 90%: {met(within >= 0.9 * total)}).")
    print(f"auto's worst ratio to the best fixed split: {worst:.2f} (target >= 0.8: {met(worst >= 0.8)}).")
    print(f"auto's choice, by its own fixed runs, within 5% of the best fixed split: {picked_within} of {picked} "
          f"configurations (not a target: it sets the choice apart from the spread between auto's runs and the same "
          f"split's fixed runs).")


if __name__ == "__main__":
    main()
