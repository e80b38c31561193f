#!/usr/bin/env bash
# Compares two ONNX Runtime libraries on this CPU, in one run: featurefs's
# extraction throughput (images/s, scripts/benchextract) of ResNet-50 layer12
# and layer18 in interleaved rounds (A B, then B A, ...), medians and
# min-max, with the process's CPU time per image (steadier than wall time
# on a shared machine), and the fidelity test (extractor
# TestLayer12MatchesTorchvision: mean and worst cosine against torchvision)
# with each. Prints markdown.
#
# Both libraries must serve the Go binding's C API level (go.mod's
# onnxruntime_go: v1.30.0 needs ONNX Runtime 1.25 or later). To compare
# with an older library, run this script from a checkout of a commit whose
# go.mod has a binding the older library serves (v1.27.0: 1.24 and later).
#
#   scripts/compare-ort.sh OLD_LIB NEW_LIB
# Env: ROUNDS (8) runs per library; BENCH_IMAGES (32) JPEGs per run;
# BATCH (4) batch size, the same for both (0: measured per run, noisier).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
[ $# -eq 2 ] || { echo "usage: $0 OLD_LIB NEW_LIB" >&2; exit 2; }
LIBS=("$1" "$2")
for l in "${LIBS[@]}"; do [ -s "$l" ] || { echo "no $l" >&2; exit 1; }; done
ROUNDS=${ROUNDS:-8}
N=${BENCH_IMAGES:-32}
BATCH=${BATCH:-4}
WORK=$(mktemp -d /tmp/featurefs-compare-ort.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
MODEL=$(model_path resnet50)

gen_extract_jpegs "$WORK/img" "$N"

cd "$REPO"
# Both binaries are built before anything runs, so the measurement is of
# this tree as it was when the script started.
go build -o "$WORK/benchextract" ./scripts/benchextract 2> >(grep -v "cgo-gcc\|nvml.h\|DEPRECATED\|^ *|\|^[0-9]* |\|go-nvml" >&2 || true)
go test -c -o "$WORK/extractor.test" ./extractor/ 2> >(grep -v "cgo-gcc\|nvml.h\|DEPRECATED\|^ *|\|^[0-9]* |\|go-nvml" >&2 || true)
version() { "$WORK/benchextract" --ort-version --ort-lib "$1"; }
V=("$(version "${LIBS[0]}")" "$(version "${LIBS[1]}")")

: >"$WORK/runs.jsonl"
for ((r = 0; r < ROUNDS; r++)); do
  order=(0 1); [ $((r % 2)) = 1 ] && order=(1 0)
  for i in "${order[@]}"; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    out=$("$WORK/benchextract" --ort-lib "${LIBS[$i]}" --model "$MODEL" --images "$WORK/img" \
      --layers layer12,layer18 --threads "$(nproc)" --batch-size "$BATCH" 2>"$WORK/run.log") ||
      { cat "$WORK/run.log" >&2; exit 1; }
    echo "{\"lib\": $i, \"round\": $r, \"load\": $load, \"results\": $out}" >>"$WORK/runs.jsonl"
    echo "round $r ${V[$i]} (load $load): $out" >&2
  done
done

# Fidelity with each library, one after the other.
for i in 0 1; do
  (cd extractor && FEATUREFS_ORT_LIB=${LIBS[$i]} "$WORK/extractor.test" -test.count=1 -test.v -test.run '^TestLayer12MatchesTorchvision$') >"$WORK/fid$i.log" 2>&1 ||
    { tail -30 "$WORK/fid$i.log" >&2; echo "fidelity test failed with ${LIBS[$i]}" >&2; exit 1; }
done

"$PY" - "$WORK/runs.jsonl" "${V[0]}" "${V[1]}" "$WORK/fid0.log" "$WORK/fid1.log" "$ROUNDS" "$N" "$BATCH" <<'PYEOF'
import json, re, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
names = [sys.argv[2], sys.argv[3]]
rounds, n, batch = sys.argv[6], sys.argv[7], sys.argv[8]
loads = [run["load"] for run in runs]
def fid(path):
    m = re.search(r"(\d+) images: mean cosine ([0-9.]+), worst ([0-9.]+)", open(path).read())
    return m.groups() if m else ("?", "?", "?")
print(f"{n} generated 500x375 JPEGs, batch {batch}, {rounds} runs per library in interleaved rounds")
print(f"(A B, B A, ...); load average (1 min) at each run's start: min {min(loads):.2f}, median {statistics.median(loads):.2f}, max {max(loads):.2f}.")
print()
print("| layer | ONNX Runtime | images/s median | min-max | CPU ms per image median | min-max | runs |")
print("|---|---|---|---|---|---|---|")
med, cpu = {}, {}
for layer in ("layer12", "layer18"):
    for i in (0, 1):
        rs = [r for run in runs if run["lib"] == i for r in run["results"] if r["layer"] == layer]
        v = [r["images_per_s"] for r in rs]
        c = [1000 * r["cpu_seconds"] / r["images"] for r in rs]
        med[layer, i], cpu[layer, i] = statistics.median(v), statistics.median(c)
        print(f"| {layer} | {names[i]} | {med[layer, i]:.2f} | {min(v):.2f}-{max(v):.2f} | {cpu[layer, i]:.0f} | {min(c):.0f}-{max(c):.0f} | {len(v)} |")
    # Paired: the two runs of a round ran back to back, so their ratio is
    # less exposed to load that drifts over minutes.
    pairs = []
    for r in sorted({run["round"] for run in runs}):
        v = {run["lib"]: x["images_per_s"] for run in runs if run["round"] == r for x in run["results"] if x["layer"] == layer}
        if len(v) == 2:
            pairs.append(v[1] / v[0])
    print(f"| {layer} | **{names[1]} vs {names[0]}** | **{med[layer, 1] / med[layer, 0]:.2f}x** images/s "
          f"(paired by round: median {statistics.median(pairs):.2f}x, {min(pairs):.2f}-{max(pairs):.2f}) | | "
          f"**{cpu[layer, 0] / cpu[layer, 1]:.2f}x** less CPU per image | | |")
print()
print("| fidelity (TestLayer12MatchesTorchvision) | images | mean cosine | worst cosine |")
print("|---|---|---|---|")
for i in (0, 1):
    k, mean, worst = fid(sys.argv[4 + i])
    print(f"| ONNX Runtime {names[i]} | {k} | {mean} | {worst} |")
PYEOF
