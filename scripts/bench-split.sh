#!/usr/bin/env bash
# measures: go.mod cmd fs extractor cache
# Benchmark (make bench): split execution (HAPI) on the two-host test bed:
# the storage side (featurefs serve) and the trainer side each in its own
# network namespace and cgroup, on their own CPUs (half of them each), joined
# by a veth pair shaped with tc tbf; the storage side also at half a core
# (a CPU quota: a weaker storage host). For ResNet-18 (layer6, layer9; every
# split), ResNet-50 (layer12, layer17), MobileNetV3-Large (layer21, layer29)
# and ConvNeXt-Tiny (layer17, layer21) (a sample of their splits), at 25,
# 100, 400 and 1000 Mbit/s: steady-state samples/s and bytes per sample of
# --split auto and of the fixed splits, 3 interleaved rounds, medians, and
# each stage's estimate against the CPU each side used (split_stages.py); then
# --split auto with the link's rate changed mid-epoch (TestSplitReplan:
# 1000 -> 25 and 25 -> 1000 Mbit/s, ResNet-18 layer6).
# Drives TestSplitBench in test/split_bench_test.go with
# FEATUREFS_SPLIT_BENCH=full. Prints one markdown section on stdout (make
# bench, or scripts/bench.sh split, stores it in docs/bench/split.md). Needs root (ip netns, tc,
# cgroups) and 2 CPUs.
#
#   scripts/bench.sh split     (after make build; about 3 hours on 2 CPUs;
#   BENCH_SPLIT_FREEZE=0 BENCH_SPLIT_EXTRA=2: about an hour)
# Env: BENCH_SPLIT_IMAGES (300: the most images a run counts, in a 4 s window
# after 8 warm-up ones, 16 readers),
# BENCH_SPLIT_ROUNDS (3: interleaved runs of each configuration, the median
# counts), BENCH_SPLIT_MODELS, BENCH_SPLIT_MBITS, BENCH_SPLIT_SPEEDS
# (comma-separated: a part of the sweep; speeds in storage cores, 0 for all),
# BENCH_SPLIT_FREEZE (0 or 1: only each model's first or second freeze layer),
# BENCH_SPLIT_EXTRA (fixed splits besides raw and none, for every model).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_bin
need_netns bench-split "ip netns, tc, cgroups"
bench_work bench-split
OUT=$WORK/out.md LOG=$WORK/log STAGES=$WORK/stages.md REPLAN=$WORK/replan.md
: >"$REPLAN"
cd "$REPO"
# logged CMD...: CMD's output in $LOG, its progress lines on stderr.
logged() { "$@" 2>&1 | tee "$LOG" | { grep --line-buffered '^splitbench: ' >&2 || true; }; }
echo "bench-split: running TestSplitBench (FEATUREFS_SPLIT_BENCH=full)..." >&2
if ! FEATUREFS_BIN=$BIN FEATUREFS_SPLIT_BENCH=full FEATUREFS_SPLIT_BENCH_OUT=$OUT \
  FEATUREFS_SPLIT_BENCH_IMAGES=${BENCH_SPLIT_IMAGES:-300} FEATUREFS_SPLIT_BENCH_ROUNDS=${BENCH_SPLIT_ROUNDS:-3} \
  FEATUREFS_SPLIT_BENCH_MODELS=${BENCH_SPLIT_MODELS:-} FEATUREFS_SPLIT_BENCH_MBITS=${BENCH_SPLIT_MBITS:-} \
  FEATUREFS_SPLIT_BENCH_SPEEDS=${BENCH_SPLIT_SPEEDS:-} FEATUREFS_SPLIT_BENCH_FREEZE=${BENCH_SPLIT_FREEZE:-} \
  FEATUREFS_SPLIT_BENCH_EXTRA=${BENCH_SPLIT_EXTRA:-} \
  logged go test -v -count=1 -timeout 240m -run '^TestSplitBench$' ./test || [ ! -s "$OUT" ]; then
  tail -n 60 "$LOG" >&2
  exit 1
fi
# Each run's stage figures, from its progress line, before the replan
# test's log takes the file.
"$PY" scripts/split_stages.py < "$LOG" > "$STAGES"
echo "bench-split: running TestSplitReplan (the link's rate changed mid-epoch)..." >&2
if ! FEATUREFS_BIN=$BIN FEATUREFS_SPLIT_BENCH=full FEATUREFS_SPLIT_REPLAN_OUT=$REPLAN \
  logged go test -v -count=1 -timeout 30m -run '^TestSplitReplan$' ./test; then
  # The sweep's figures are still printed (an hour of runs is not thrown
  # away for the second test); the script fails at the end.
  tail -n 60 "$LOG" >&2
  { echo "## Split execution: --split auto after the link's rate changes mid-epoch"; echo
    echo "TestSplitReplan FAILED; its last lines:"; echo; tail -n 20 "$LOG" | sed 's/^/    /'; } > "$REPLAN"
  FAILED=1
fi
cat "$OUT"
echo
echo "**Stage times.** Per configuration and policy, the medians over its rounds: the cost model's per-sample estimate of"
echo "each stage against what each side's processes used over the run's window (CPU ms per sample, user + system, divided"
echo "by the side's cores: its quota, or 1) and the split's payload at the link's rate (scripts/split_stages.py, from the"
echo "runs' progress lines):"
echo
cat "$STAGES"
echo
cat "$REPLAN"
[ -z "${FAILED:-}" ]
