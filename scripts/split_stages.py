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
import statistics
import sys

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
    runs = {}
    order = []
    for ln in sys.stdin:
        m = LINE.search(ln)
        if not m:
            continue
        d = m.groupdict()
        key = (d["cores"], d["model"], int(d["freeze"]), int(d["mbit"]), d["policy"])
        if key not in runs:
            runs[key] = []
            order.append(key)
        runs[key].append(d)
    if not runs:
        sys.exit("split_stages: no progress lines with stage figures on stdin")
    if summary:
        print_summary(runs, order)
        return
    print("| storage cores | model | freeze | link | policy | split | samples/s | predicted/s "
          "| server ms: predicted, measured | wire ms: predicted, at the link's rate | client ms: predicted, measured | rounds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for key in order:
        rs = runs[key]
        cores, model, freeze, mbit, policy = key
        share = float(cores) if cores != "all" else 1.0

        def med(f):
            return statistics.median(f(r) for r in rs)
        server = med(lambda r: (float(r["su"]) + float(r["ss"])) / share)
        client = med(lambda r: float(r["tu"]) + float(r["ts"]))
        wire = med(lambda r: float(r["payload"]) * 8 / (mbit * 1e6) * 1e3)
        splits = sorted({r["split"] for r in rs})
        print(f"| {cores} | {model} | layer{freeze} | {mbit} Mbit/s | {policy} | {'/'.join(splits)} "
              f"| {med(lambda r: float(r['rate'])):.2f} | {med(lambda r: float(r['pred'])):.2f} "
              f"| {med(lambda r: float(r['ps'])):.1f}, {server:.1f} | {med(lambda r: float(r['pw'])):.1f}, {wire:.1f} "
              f"| {med(lambda r: float(r['pc'])):.1f}, {client:.1f} | {len(rs)} |")


def print_summary(runs, order):
    configs = []
    for key in order:
        if key[:4] not in configs:
            configs.append(key[:4])
    print("| storage cores | model | freeze | link | auto: split(s), samples/s (runs) | best fixed: split, samples/s "
          "| auto ÷ best | raw samples/s | auto ÷ raw | predicted samples/s: auto's split, best fixed's |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    within = total = 0
    picked = picked_within = 0
    worst = float("inf")
    for cores, model, freeze, mbit in configs:
        pols = {k[4]: runs[k] for k in order if k[:4] == (cores, model, freeze, mbit)}
        if "auto" not in pols or len(pols) < 2:
            continue

        def med(rs, f):
            return statistics.median(f(r) for r in rs)
        rate = {p: med(rs, lambda r: float(r["rate"])) for p, rs in pols.items()}
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
              f"| {med(auto, lambda r: float(r['pred'])):.2f}, {med(pols[best], lambda r: float(r['pred'])):.2f} |")
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
