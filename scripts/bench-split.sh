#!/usr/bin/env bash
# Benchmark (make bench): split execution (HAPI) over the netns test bed.
# For ResNet-50 (freeze layer12 and layer17) and ResNet-18 (layer6, layer9),
# at 50 Mbit/s, 200 Mbit/s and 1 Gbit/s (tc tbf on a veth pair between a
# storage and a trainer network namespace): steady-state samples/s and bytes
# per sample of --split auto, fixed splits (raw images = the baseline, none =
# the freeze layer, the cost model's best ranked layers and a spread of
# others), over one long-lived featurefs serve re-shaped per bandwidth.
# Drives TestSplitBench in test/split_bench_test.go with
# FEATUREFS_SPLIT_BENCH=full. Prints one markdown section on stdout (make
# bench also stores it in docs/bench/split.md). Needs root (ip netns, tc).
#
#   scripts/bench-split.sh     (after make build; about 15 minutes on 2 CPUs)
# Env: BENCH_SPLIT_IMAGES (16 timed images per configuration, after 4 warm-up),
# BENCH_SPLIT_ROUNDS (2: each configuration runs that often, the fastest counts).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_bin
[ "$(id -u)" = 0 ] || { echo "bench-split needs root (ip netns, tc)" >&2; exit 1; }
command -v tc >/dev/null || { echo "no tc: install iproute2" >&2; exit 1; }

OUT=$(mktemp /tmp/featurefs-bench-split.XXXXXX.md)
LOG=$(mktemp /tmp/featurefs-bench-split.XXXXXX.log)
trap 'rm -f "$OUT" "$LOG"' EXIT
cd "$REPO"
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
echo "bench-split: running TestSplitBench (FEATUREFS_SPLIT_BENCH=full)..." >&2
if ! FEATUREFS_BIN=$BIN FEATUREFS_SPLIT_BENCH=full FEATUREFS_SPLIT_BENCH_OUT=$OUT \
  FEATUREFS_SPLIT_BENCH_IMAGES=${BENCH_SPLIT_IMAGES:-16} FEATUREFS_SPLIT_BENCH_ROUNDS=${BENCH_SPLIT_ROUNDS:-2} \
  go test -v -count=1 -timeout 60m -run '^TestSplitBench$' ./test 2>&1 | tee "$LOG" | { grep --line-buffered '^splitbench: ' >&2 || true; }; then
  tail -n 60 "$LOG" >&2
  exit 1
fi
[ -s "$OUT" ] || { tail -n 60 "$LOG" >&2; exit 1; }
cat "$OUT"
echo
echo "Environment: $(nproc) CPUs, $(uname -m)$(command -v nvidia-smi >/dev/null && echo ", $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"), load average at the start: $LOAD."
