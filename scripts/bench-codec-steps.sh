#!/usr/bin/env bash
# measures: go.mod cache/codec
# Benchmark: the feature codec's steps on their own (cache/codec's Go
# benchmarks on activation-like data: ReLU maps of 14x14 values, each with
# its own log-normal scale and 30-70% zeros, a tenth all zero): the shuffle
# and unshuffle, S2 alone, CRC-32C alone, the whole Encode and Decode,
# ReadAt of 4 KiB and 1 MiB, S2 on each byte plane, the shuffle's paths,
# and each method's encode and decode. BENCH_COUNT interleaved rounds (the
# test binary run once per round over every benchmark): the median
# (min-max) of wall time and of the process's CPU time per operation
# (cpu-ns/op), MB/s, the stored ratio where the benchmark reports one, and
# allocations. Prints one markdown section (scripts/bench.sh codec-steps
# stores it in docs/bench/codec-steps.md; docs/CODEC.md cites it).
#
#   scripts/bench.sh codec-steps     (a few minutes on 2 CPUs)
# Env: BENCH_COUNT (3), BENCH_TIME (0.3s: -benchtime).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
COUNT=${BENCH_COUNT:-3}
BTIME=${BENCH_TIME:-0.3s}
cd "$REPO"
bench_work codec-steps
OUT=$WORK/out.txt
go test -c -o "$WORK/codec.test" ./cache/codec
for i in $(seq "$COUNT"); do
  echo "bench-codec-steps: round $i of $COUNT (-benchtime $BTIME)..." >&2
  "$WORK/codec.test" -test.run '^$' -test.bench '^Benchmark(Step|Encode|Decode|ReadAt|S2Planes|ShufflePath)' \
    -test.benchtime "$BTIME" -test.count 1 >>"$OUT" 2>&1 || { cat "$OUT" >&2; exit 1; }
done
bench_py - "$OUT" "$COUNT" "$BTIME" <<'PYEOF'
import re, sys
from benchlib import cell, med
path, count, btime = sys.argv[1], sys.argv[2], sys.argv[3]
runs = {}  # in the order of the output
for line in open(path):
    f = line.split()
    if not f or not f[0].startswith("Benchmark") or len(f) < 4:
        continue
    name = re.sub(r"-\d+$", "", f[0][len("Benchmark"):])
    vals = {f[i + 1]: float(f[i]) for i in range(2, len(f) - 1, 2) if re.match(r"^[0-9.e+-]+$", f[i])}
    runs.setdefault(name, []).append(vals)
def fig(xs, fmt):
    return cell(xs, fmt) if len(xs) > 1 else fmt.format(med(xs))
print("## Codec steps: cache/codec's benchmarks on activation-like data")
print()
print(f"cache/codec's test binary with `-test.bench '^Benchmark(Step|Encode|Decode|ReadAt|S2Planes|ShufflePath)' -test.benchtime {btime}`,")
print(f"run {count} times over every benchmark (interleaved rounds): each figure the median (min-max) of the rounds. The sets (cache/codec/bench_test.go): ReLU-like maps of 14x14")
print("values, each with its own log-normal scale and 30-70% zeros, a tenth all zero, as float32 and float16 features of")
print("the named size. cpu-ns/op: the process's CPU time per operation (the benchmark's goroutine and the garbage")
print("collector's). ratio: raw bytes over stored bytes (S2 unless the name says another method).")
print()
print("| benchmark | us/op | CPU us/op | MB/s | ratio | allocs/op |")
print("|---|---:|---:|---:|---:|---:|")
for name, rs in runs.items():
    col = lambda k: [r[k] for r in rs if k in r]
    ns, cpu, mbs, ratio, allocs = col("ns/op"), col("cpu-ns/op"), col("MB/s"), col("ratio"), col("allocs/op")
    print("| " + " | ".join([
        name,
        fig([x / 1000 for x in ns], "{:.1f}") if ns else "",
        fig([x / 1000 for x in cpu], "{:.1f}") if cpu else "",
        fig(mbs, "{:.0f}") if mbs else "",
        f"{med(ratio):.2f}x" if ratio else "",
        f"{med(allocs):.0f}" if allocs else "",
    ]) + " |")
PYEOF
