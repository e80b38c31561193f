#!/usr/bin/env bash
# Compare the codec's per-step Go benchmarks (cache/codec/bench*_test.go)
# between an older commit (BASE, default main) and the working tree, in one
# run on this machine: the same benchmark files are run against BASE's
# cache/codec sources (copied into a scratch package) and against the
# working tree's, alternating COUNT times (-count 1 each), and benchstat
# compares the two (its module is fetched by the go command): wall time,
# the process's CPU time per operation (cpu-ns/op: what a loaded machine
# leaves least changed), bytes/s and allocations. Not a `make bench`
# script: it prints a benchstat table, not a docs/bench section.
#
#   scripts/codec-steps-compare.sh [BASE]
# Env: COUNT (5), BENCHTIME (0.5s), BENCH (the -bench regexp, default all
# of bench_test.go's benchmarks).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
BASE=${1:-main}
COUNT=${COUNT:-5}
BENCHTIME=${BENCHTIME:-0.5s}
BENCH=${BENCH:-'^Benchmark(Step|Encode$|Decode$|ReadAt$)'}
cd "$REPO"
OLD=cache/codec/zz_benchbase
cleanup() { rm -rf "$REPO/$OLD"; }
bench_work codec-steps cleanup
mkdir -p "$OLD"
for f in $(git ls-tree --name-only "$BASE" cache/codec/); do
  case "$f" in
  *_test.go) ;;
  *.go | *.s) git show "$BASE:$f" > "$OLD/$(basename "$f")" ;;
  esac
done
cp cache/codec/bench*_test.go "$OLD/"
go test -c -o "$WORK/old.test" "./$OLD"
go test -c -o "$WORK/new.test" ./cache/codec
for i in $(seq "$COUNT"); do
  echo "codec-steps: round $i of $COUNT" >&2
  "$WORK/old.test" -test.run '^$' -test.bench "$BENCH" -test.benchtime "$BENCHTIME" -test.count 1 >> "$WORK/old.txt"
  "$WORK/new.test" -test.run '^$' -test.bench "$BENCH" -test.benchtime "$BENCHTIME" -test.count 1 >> "$WORK/new.txt"
done
echo "base $(git rev-parse --short "$BASE"), new $(git rev-parse --short HEAD)$(git diff --quiet -- cache/codec || echo '+changes'), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
cd "$WORK" && go run golang.org/x/perf/cmd/benchstat@latest -ignore pkg old.txt new.txt
