#!/usr/bin/env bash
# measures: go.mod extractor cmd
# Benchmark: two featurefs builds' extractor side by side, with the page
# faults and system time of each run (the arena change of issue 51: glibc
# handing activation buffers back to the kernel between batches).
# `featurefs bench --modes extract --device cpu` of ResNet-50 layer12 and
# ResNet-18 layer6 at batch 4 pinned to CPU 0, and of ResNet-50 layer12 at
# the automatic batch size on CPUs 0-1, on AB_FAULTS_IMAGES generated
# JPEGs (scripts/gen_dataset.py), OLD and NEW alternating in AB_ROUNDS
# rounds. Prints one line per run: round, model, layer, batch asked, CPUs,
# arm, images/s, batch run, process CPU ms per image, user s, system s,
# minor faults, peak RSS KiB, 1-minute load.
#
#   OLD=/path/to/old/featurefs scripts/ab-faults.sh   (NEW: bin/featurefs)
# Env: OLD (required), NEW, AB_ROUNDS (3), AB_FAULTS_IMAGES (384).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
OLD=${OLD:?OLD=path of the older featurefs binary}
NEW=${NEW:-$BIN}
BIN=$NEW
need_bin
WORK=$(mktemp -d /tmp/featurefs-abf.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
n=${AB_FAULTS_IMAGES:-384}
"$PY" "$REPO/scripts/gen_dataset.py" --out "$WORK/data" --classes 2 --train $((n / 2)) --val 0 --formats jpg >&2
for r in $(seq "${AB_ROUNDS:-3}"); do
  for m in resnet50:layer12:4:0 resnet18:layer6:4:0 resnet50:layer12:0:0,1; do
    IFS=: read -r model layer bs cpus <<<"$m"
    for arm in old new; do
      bin=$OLD
      [ "$arm" = new ] && bin=$NEW
      /usr/bin/time -f "%U %S %R %M" -o "$WORK/time" taskset -c "$cpus" "$bin" bench --model "$(model_path "$model")" \
        --device cpu --modes extract --layers "$layer" --batch-size "$bs" "$WORK/data" 2>/dev/null >"$WORK/json"
      echo "$r $model $layer b$bs cpus$cpus $arm $("$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(round(d['images_per_s'],2), d['batch'], round(d['cpu_seconds']/d['images']*1000,1))" "$WORK/json") $(cat "$WORK/time") load $(cut -d' ' -f1 /proc/loadavg)"
    done
  done
done
