#!/usr/bin/env bash
# measures: go.mod cmd fs extractor cache
# Benchmark (issue 49 item 6): the mount's peak resident set with
# --memory-limit 512MiB, 1GiB and none, over reading ResNet-50's layer12 and
# layer18 of BENCH_MEMORY_IMAGES generated JPEGs twice through a fresh
# mount, --device cpu, in BENCH_ROUNDS interleaved rounds, the binary of
# this checkout ("new") against BENCH_MEMORY_OLD (a binary built from an
# older commit, optional: "old"). Prints a markdown section on stdout
# (docs/bench/memory.md holds it); progress on stderr.
#
#   scripts/bench-memory.sh   (as root: it mounts)
# Env: BENCH_MEMORY_IMAGES (24), BENCH_ROUNDS (3), BENCH_MEMORY_OLD (unset),
#      BENCH_MEMORY_LIMITS ("512MiB 1GiB 0"), FEATUREFS_BIN (bin/featurefs)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${FEATUREFS_BIN:-bin/featurefs}
[ -x "$bin" ] || go build -o "$bin" ./cmd/featurefs
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
n=${BENCH_MEMORY_IMAGES:-24}
/usr/bin/python3 scripts/gen_dataset.py --out "$work/data" --classes 2 --train $((n / 2)) --val 0 --formats jpg >&2
model=$(ls "$HOME"/.cache/featurefs/models/resnet50-*.onnx 2>/dev/null | head -1)
[ -n "$model" ] || { echo "no ResNet-50 in ~/.cache/featurefs/models: go test ./test -run TestMemoryLimit exports one" >&2; exit 1; }
arms=(--arm "new=$bin")
[ -n "${BENCH_MEMORY_OLD:-}" ] && arms+=(--arm "old=$BENCH_MEMORY_OLD")
limits=()
for l in ${BENCH_MEMORY_LIMITS:-512MiB 1GiB 0}; do limits+=(--limit "$l"); done
echo "## Peak memory over two ResNet-50 layers, $n images, read twice"
echo
echo "Medians (min-max) of ${BENCH_ROUNDS:-3} interleaved rounds."
echo
/usr/bin/python3 scripts/bench_memory.py "${arms[@]}" "${limits[@]}" --model "$model" --data "$work/data" --rounds "${BENCH_ROUNDS:-3}"
echo
echo "## More sessions than the limit holds: five ResNet-50 layers under --memory-limit 512MiB"
echo
echo "scripts/memory-layers.sh, ${BENCH_ROUNDS:-3} runs: a mount with \`--memory-limit 512MiB\` warming layer12, 15, 16, 17"
echo "and 18 in turn, twice (\`featurefs warm --jobs 8\`, 24 generated JPEGs); the extractor keeps up to 4 sessions and"
echo "closes idle ones before an opening that would pass the limit. Target: peak RSS (VmHWM) <= 512 MiB."
echo
echo "| run | peak RSS (VmHWM), MiB | sessions open at the end | sessions' C heap, MiB | closed for memory |"
echo "|---|---|---|---|---|"
for r in $(seq "${BENCH_ROUNDS:-3}"); do
  BENCH_WORK=$work/layers bash scripts/memory-layers.sh "$bin" "run$r" |
    awk -v r="$r" '{print "| " r " | " $3 " | " $5 " | " $11 " | " $9 " |"}'
done
