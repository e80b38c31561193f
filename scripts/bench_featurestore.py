#!/usr/bin/python3
"""Report of scripts/bench-featurestore.sh: one markdown section on stdout.

    bench_featurestore.py --fill FILL.json [--objects OBJECTS.json] --round KIND=JSON KIND=JSON [--round ...]

Each JSON is scripts/bench_epoch.py featurefs's output for one epoch. KIND is
compute (a second host computing its features) or store (reading them from
the feature store with --feature-store-only). Figures: medians over the
rounds with min-max; the ratio compute/store is computed within each round,
its verdict from the median of those. OBJECTS.json is {"objects": N,
"bytes": B}: the feature objects in the store after the fill.
"""
import argparse
import json

from benchlib import cell, med, span

TARGET = 5.0


def e1(r):
    return r["setup_seconds"] + r["epochs"][0]["seconds"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fill", required=True)
    ap.add_argument("--round", action="append", nargs="+", required=True)
    ap.add_argument("--objects")
    a = ap.parse_args()
    rounds = []
    for spec in a.round:
        rnd = {}
        for kv in spec:
            k, p = kv.split("=", 1)
            with open(p) as f:
                rnd[k] = json.load(f)
        rnd["order"] = [kv.split("=", 1)[0] for kv in spec]
        rounds.append(rnd)
    with open(a.fill) as f:
        fill = json.load(f)
    n = fill["samples"]
    ratios = [e1(r["compute"]) / e1(r["store"]) for r in rounds]
    verdict = ("met" if med(ratios) >= TARGET else "MISSED") if len(rounds) >= 3 else "no verdict: fewer than 3 rounds"

    def per_sample(kind, get):
        return [get(r[kind]["stats"]) / r[kind]["samples"] for r in rounds]

    src = lambda s: s["store"]["bytes_fetched"]
    fsb = lambda s: (s.get("feature_store") or {}).get("hit_bytes", 0)
    ext = lambda r: r["stats"]["fs"]["extractions"]
    print("## Feature store: a second host's epoch 1, from the store vs computing\n")
    print(f"{n} generated JPEGs (sides 160-640 px) in a local MinIO bucket; ResNet-50 (random seeded weights) layer12 "
          "(802,944-byte .npy files); each run a fresh `featurefs mount` with a fresh cache directory, "
          "`DatasetFolder(MOUNT/features/resnet50/layer12/train, loader=np.load)`, `DataLoader(num_workers=4, batch 32)`, "
          "one epoch training the linear head of scripts/bench-epoch.sh. A first host filled the feature store "
          f"(`--feature-store s3://features/bench`, same MinIO, `--feature-store-compression s2`, the default) once, in {e1(fill):.1f}s, writing "
          f"{(fill['stats'].get('feature_store') or {}).get('puts', 0)} features. Then {len(rounds)} interleaved rounds, "
          "the order alternating: compute = a second host with no feature store (extracts every feature on this CPU), "
          "store = a second host with `--feature-store ... --feature-store-only` (extracts nothing).\n")
    hits = lambda r: (r["stats"].get("feature_store") or {}).get("hits", 0)
    print("| run | epoch 1 incl. mount s | mount s | extractions | feature store hits | source bytes / sample | feature store bytes / sample, decompressed |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for kind, label in (("compute", "second host, computing"), ("store", "second host, from the feature store")):
        print(f"| {label} | {cell([e1(r[kind]) for r in rounds])} | {cell([r[kind]['mount_seconds'] for r in rounds])} | "
              f"{med([ext(r[kind]) for r in rounds]):.0f} | {med([hits(r[kind]) for r in rounds]):.0f} | "
              f"{med(per_sample(kind, src)):,.0f} | {med(per_sample(kind, fsb)):,.0f} |")
    print()
    st = [r["store"]["stats"].get("feature_store") or {} for r in rounds]
    per_hit = [s["hit_bytes"] / s["hits"] for s in st if s.get("hits")]
    if per_hit:
        stored = ""
        if a.objects:
            with open(a.objects) as f:
                o = json.load(f)
            if o["objects"]:
                mean = o["bytes"] / o["objects"]
                stored = (f" The store holds {o['objects']} feature objects of {mean:,.0f} bytes on average (compressed): "
                          f"{med(per_hit) / mean:.2f}x fewer than the .npy files, so a hit moves that many "
                          "fewer bytes than the column above, which counts them decompressed.")
        print(f"Each feature read from the store is {med(per_hit):,.0f} bytes once decompressed (the .npy file; its metadata "
              f"travels in the response headers).{stored} Extractions and hits above the sample count are a read and "
              "prefetch (`--prefetch tree`, the default) asking for the same feature at once: their extraction "
              "requests merge in the extractor (one model run) but are counted twice, and both read the store, so "
              f"the bytes per training sample are above one feature's. The compute host fetched the JPEGs ({med(per_sample('compute', src)):,.0f} "
              "bytes per sample), the store host no image at all.\n")
    print("| target | median of per-round ratios | min-max | by round |")
    print("|---|---|---:|---|")
    print(f"| second host's epoch 1, computing / from the feature store | **{med(ratios):.2f}x** (target >= {TARGET:g}x: {verdict}) | "
          f"{span(ratios, 'x')} | {', '.join(f'{x:.2f}' for x in ratios)} |")
    print()
    loads = ", ".join(f"{r[k]['load_start']:.1f}/{r[k]['load_end']:.1f}" for r in rounds for k in r["order"])
    print(f"Load average (1 min) at start/end of each run, in order: {loads}.")


if __name__ == "__main__":
    main()
