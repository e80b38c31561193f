#!/usr/bin/env bash
# measures: go.mod fs/remote extractor cache
# Benchmark (make bench): near-data batching, features/s fetched from a
# server whose cache holds them, batched (MaxBatch 64, 4 requests in
# flight) against one request per feature (16 in flight), 64 concurrent
# readers over loopback, no model: BenchmarkBatchVsSingle in
# fs/remote/bench_test.go (the server uncompressed, so the bytes are the
# features'). BENCH_ROUNDS rounds (go test -count), each measuring both
# modes back to back (one request per feature first) for each feature size;
# the ratio is the median of the per-round ratios. Prints one markdown
# section on stdout (make bench stores it in docs/bench/batch.md); progress
# on stderr.
#
#   scripts/bench-batch.sh     (a Go toolchain; about 10 s a round on 2 CPUs)
# Env: BENCH_ROUNDS (5).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
ROUNDS=${BENCH_ROUNDS:-5}
bench_work bench-batch
cd "$REPO"
echo "bench-batch: building fs/remote's test binary..." >&2
go test -c -o "$WORK/remote.test" ./fs/remote >&2
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
echo "bench-batch: $ROUNDS rounds of BenchmarkBatchVsSingle..." >&2
(cd fs/remote && "$WORK/remote.test" -test.run '^$' -test.bench '^BenchmarkBatchVsSingle$' \
  -test.benchtime 1x -test.count "$ROUNDS") >"$WORK/out.txt" 2>&1 || { cat "$WORK/out.txt" >&2; exit 1; }
bench_py - "$WORK/out.txt" "$ROUNDS" "$LOAD_BEFORE" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PYEOF'
import re, sys
from benchlib import cell, med, span
path, rounds, before, after = sys.argv[1:]
runs = {}
for line in open(path):
    m = re.match(r"BenchmarkBatchVsSingle/shape=\[([0-9 _]+)\]\S*\s+\d+\s+(.*)", line)
    if not m:
        continue
    metrics = {unit: float(v) for v, unit in re.findall(r"([0-9.e+-]+) (\S+)", m.group(2))}
    runs.setdefault(m.group(1), []).append(metrics)
if len(runs) != 2 or any(len(r) != int(rounds) for r in runs.values()):
    sys.exit("bench-batch: expected %s rounds per shape, got %s" % (rounds, {k: len(v) for k, v in runs.items()}))
names = {"2048": "2048 floats (ResNet-50 layer18, 8 KiB)", "1024_14_14": "1024x14x14 (layer12, 784 KiB)"}
print("## Near-data batching: features/s, batched vs one request per feature")
print()
print("`go test -run '^$' -bench BatchVsSingle -benchtime 1x -count %s ./fs/remote` (a test binary built first; "
      "load average %s before its rounds, %s after)." % (rounds, before, after))
print("A `featurefs serve` server (fs/remote.Server, wire compression off) on loopback whose cache holds 2048 features, "
      "read by 64 concurrent readers through fs/remote.Client: batched (`--remote-max-batch 64`, 4 requests in flight) "
      "against one request per feature (`--remote-max-batch 1`, 16 in flight); no model runs, so this is the per-request "
      "cost and the transfer only. %s rounds, each measuring both modes back to back (one request per feature first): "
      "medians with min-max, and the median of the per-round ratios." % rounds)
print()
print("| feature | batched features/s | one per request features/s | **batched / one per request** | min-max | by round |")
print("|---|---:|---:|---|---:|---|")
for shape, rs in runs.items():
    b = [r["batched_features/s"] for r in rs]
    s = [r["single_features/s"] for r in rs]
    q = [r["ratio"] for r in rs]
    print("| %s | %s | %s | **%.2fx** | %s | %s |" % (
        names.get(shape, shape), cell(b, "{:.0f}"), cell(s, "{:.0f}"), med(q), span(q, "x"), ", ".join("%.2f" % x for x in q)))
PYEOF
