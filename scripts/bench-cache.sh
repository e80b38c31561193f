#!/usr/bin/env bash
# measures: go.mod cache scripts/benchcache
# Benchmark (make bench): the feature cache. Reads of 800 KB values (a
# ResNet-50 layer12 feature) from a warm cache with 4 concurrent readers vs
# reading the same bytes from one file each on the same local disk, in the
# same run, alternating; Put throughput vs writing files; disk bytes per
# stored byte after value-log GC. Then the cache alone (scripts/benchcache,
# issue 37 item 5): CPU-seconds per 803 KB feature and MB/s of Put and Get
# from 1, 2 and NumCPU goroutines against os.WriteFile/os.ReadFile of the
# same bytes, for each storage layout (large values in files or all in
# Badger, raw, zeros-elision or S2), interleaved rounds. Prints markdown on
# stdout.
#
#   scripts/bench-cache.sh
# Env: BENCH_CPU_ROUNDS (3) and BENCH_CPU_FEATURES (48): rounds and
# features per phase of scripts/benchcache;
# BENCH_ROUNDS (8): iterations per benchmark; BENCH_COUNT (3): runs,
# the median of which is reported; TMPDIR: where the data goes (the disk
# being measured).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
ROUNDS=${BENCH_ROUNDS:-8}
COUNT=${BENCH_COUNT:-3}
DATA=${TMPDIR:-/tmp}
cd "$REPO"
OUT=$(go test ./cache/ -run '^$' -bench '^Benchmark(WarmRead|Write)$' -benchtime "${ROUNDS}x" -count "$COUNT" 2>&1) ||
	{ echo "$OUT" >&2; exit 1; }
# metric BENCH UNIT: the median over the runs of the value before UNIT.
metric() {
	echo "$OUT" | awk -v b="$1" -v u="$2" '$1 ~ "^"b"(-[0-9]+)?$" {for (i=2;i<NF;i++) if ($(i+1)==u) print $i}' |
		sort -g | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]}'
}
fmt() { awk -v x="$1" -v p="${2:-0}" 'BEGIN { printf "%.*f", p, x }'; }
RC=$(metric BenchmarkWarmRead cache-MB/s); RF=$(metric BenchmarkWarmRead files-MB/s); RR=$(metric BenchmarkWarmRead ratio)
WC=$(metric BenchmarkWrite cache-MB/s); WF=$(metric BenchmarkWrite files-MB/s); WR=$(metric BenchmarkWrite ratio)
DS=$(metric BenchmarkWrite disk/stored); SM=$(metric BenchmarkWrite stored-MB); DM=$(metric BenchmarkWrite disk-MB)
for v in "$RC" "$RF" "$RR" "$WC" "$WF" "$WR" "$DS"; do
	[ -n "$v" ] || { echo "$OUT" >&2; exit 1; }
done
ALL=$(echo "$OUT" | awk '$1 ~ /^BenchmarkWarmRead/ {for (i=2;i<NF;i++) if ($(i+1)=="ratio") printf "%s%.2f", (n++ ? ", " : ""), $i}')
CPU_ROUNDS=${BENCH_CPU_ROUNDS:-3}
CPU_FEATURES=${BENCH_CPU_FEATURES:-48}
CPU_OUT=$(go run ./scripts/benchcache -rounds "$CPU_ROUNDS" -features "$CPU_FEATURES" -dir "$DATA") ||
	{ echo "$CPU_OUT" >&2; exit 1; }
FS=$(df -T "$DATA" | awk 'NR==2 {print $2}')

cat <<MD
## Cache: warm reads of 800 KB features vs local files

\`scripts/bench-cache.sh\` (\`go test ./cache/ -bench '^Benchmark(WarmRead|Write)\$' -benchtime ${ROUNDS}x -count $COUNT\`,
median of $COUNT runs; data in $DATA on $FS)

| case | figure |
|---|---|
| warm cache \`Get\`, 192 values of 802,944 B (ResNet-50 layer12 .npy), 4 readers | $(fmt "$RC") MB/s |
| same bytes, one file each, \`os.ReadFile\`, 4 readers (baseline, same run) | $(fmt "$RF") MB/s |
| **read ratio cache / files** (target >= 0.8; each run: $ALL) | **$(fmt "$RR" 2)** |
| cache \`Put\` of 800 KB values, 4 writers, into a 256 MiB budget (eviction and GC running) | $(fmt "$WC") MB/s |
| same bytes, one file each, \`os.WriteFile\` without fsync, 4 writers (baseline) | $(fmt "$WF") MB/s |
| write ratio cache / files | $(fmt "$WR" 2) |
| disk bytes per stored byte after GC ($(fmt "$DM") MB on disk for $(fmt "$SM") MB stored) | $(fmt "$DS" 2) |

Both read paths copy from the page cache into a fresh 800 KB buffer through \`read(2)\`: an 800 KB value is
stored in a file of its own, its index entry in Badger (docs/CACHE.md); the cache verifies a CRC-32C per 64 KiB
chunk. The ratio measures the cache's per-read overhead: the key hash, the index, Badger's LSM lookup of the
pointer, the open and the checksum. Writes add a temporary file renamed into place, the index entry in Badger
and evictions (whose files are unlinked at once).

## Cache alone: CPU per 803 KB feature, Put and Get vs plain files

\`go run ./scripts/benchcache -rounds $CPU_ROUNDS -features $CPU_FEATURES\` (in \`scripts/bench-cache.sh\`; data in $DATA on $FS).
Each phase Puts, then Gets (warm), then reads in 128 KiB \`ReadAt\` pieces as the mount does (plain files: open, pread, close) $CPU_FEATURES ResNet-50 layer12-shaped features (802,944 B .npy of post-ReLU float32,
about half zeros) from W goroutines; CPU is the process's getrusage user+sys over the phase (Badger's goroutines
and the GC included) per feature; the plain-files baseline is \`os.WriteFile\`/\`os.ReadFile\` of the same bytes
into one file each in the same filesystem, same round. Variants run in a rotated order each round; each figure is
the median over the rounds (min-max), the ratio the median of the per-round ratios. Design: docs/CACHE.md.

$CPU_OUT
MD
