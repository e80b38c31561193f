#!/usr/bin/env bash
# measures: go.mod cmd fs extractor cache
# Benchmark (make bench): compression on the wire between `featurefs serve`
# and `featurefs mount --remote`. Drives TestWireCompressionBench in
# test/wire_bench_test.go with FEATUREFS_WIRE_BENCH=full: ResNet-50 layer12
# features over two netns links shaped alike (tc tbf; 50 and 200 Mbit/s),
# one server with --wire-compression off and one with s2, side by side in
# interleaved rounds. Prints one markdown section on stdout (make bench
# stores it in docs/bench/wire.md). Needs root (ip netns, tc).
#
#   scripts/bench-wire.sh     (after make build; a few minutes on 2 CPUs)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_bin
need_netns bench-wire "ip netns, tc"
bench_work bench-wire
cd "$REPO"
echo "bench-wire: running TestWireCompressionBench (FEATUREFS_WIRE_BENCH=full)..." >&2
if ! FEATUREFS_BIN=$BIN FEATUREFS_WIRE_BENCH=full FEATUREFS_WIRE_BENCH_OUT=$WORK/out.md \
  go test -v -count=1 -timeout 30m -run '^TestWireCompressionBench$' ./test >"$WORK/log" 2>&1 || [ ! -s "$WORK/out.md" ]; then
  tail -n 60 "$WORK/log" >&2
  exit 1
fi
cat "$WORK/out.md"
