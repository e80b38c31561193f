#!/usr/bin/env bash
# measures: go.mod cmd fs extractor cache
# Benchmark (make bench): a model reload under reads. A `--device cpu
# --prefetch off` mount of generated images with ResNet-50 (base.onnx of
# scripts/export_versions.py); layer4 (unchanged by layer4fc.onnx) and
# layer15 (changed) warmed; then BENCH_ROUNDS rounds of
# scripts/bench_reload.py: one thread times every read of the warm layer4
# files for a baseline window, the model file is replaced by a rename with
# the other version (alternating), and the reads go on through the reload
# until the mount's `model reloaded` line. Reports the longest read of the
# reload window vs the baseline window's and vs one batch (a cold layer4
# read in the same round, after the round's first, which after a reload
# shows whether layer4's session was kept), the reload's load time, failed
# and mixed reads.
# Prints one markdown section on stdout (make bench stores it in
# docs/bench/reload.md).
#
#   scripts/bench-reload.sh     (after make build; about 2 minutes on 2 CPUs, with the versions exported)
# Env: BENCH_ROUNDS (5), BENCH_WARM (8 warm images), BENCH_BASELINE (5 s).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_bin

ROUNDS=${BENCH_ROUNDS:-5}
WARM=${BENCH_WARM:-8}
BASELINE=${BENCH_BASELINE:-5}
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_ROUNDS=$ROUNDS: want a positive integer" >&2; exit 1; }
WORK=$(mktemp -d /tmp/featurefs-bench-reload.XXXXXX)
MNT=$WORK/mnt
MINIO_PID= # no MinIO: epoch_cleanup (lib.sh) unmounts, tails the log on failure, removes WORK
trap epoch_cleanup EXIT
mkdir -p "$MNT"

# The versions, exported once per version of the scripts into $DEPS/models
# under the name the Go tests use (testenv.ModelVersions).
sum=$(cat "$REPO/scripts/export_versions.py" "$REPO/scripts/export_model.py" | sha256sum | cut -c1-8)
VERSIONS=$DEPS/models/versions-$sum
if [ ! -f "$VERSIONS/done" ]; then
  echo "bench-reload: exporting the ResNet-50 versions to $VERSIONS..." >&2
  mkdir -p "$DEPS/models"
  flock "$VERSIONS.lock" sh -c "[ -f '$VERSIONS/done' ] || { '$PY' '$REPO/scripts/export_versions.py' --out '$VERSIONS' && touch '$VERSIONS/done'; }" >&2
fi
cp "$VERSIONS/base.onnx" "$WORK/model.onnx"

# One class of WARM warm images, one of 2*ROUNDS cold ones (two per round).
"$PY" "$REPO/scripts/gen_dataset.py" --out "$WORK/images" --classes 2 --train $((WARM > 2 * ROUNDS ? WARM : 2 * ROUNDS)) \
  --val 0 --formats jpg --min-side 160 --max-side 640 2>/dev/null
rm -f "$WORK/images/manifest.json"
mapfile -t CLASSES < <(ls "$WORK/images/train")
mapfile -t WARMF < <(cd "$WORK/images" && ls "train/${CLASSES[0]}" | head -n "$WARM" | sed "s|^|train/${CLASSES[0]}/|; s|\.[^.]*$|.npy|")
mapfile -t COLDF < <(cd "$WORK/images" && ls "train/${CLASSES[1]}" | head -n $((2 * ROUNDS)) | sed "s|^|train/${CLASSES[1]}/|; s|\.[^.]*$|.npy|")

featurefs_mount --model "resnet50=$WORK/model.onnx" --device cpu --prefetch off --cache-dir "$WORK/cache" \
  --log-file "$WORK/featurefs-mount.log" "$WORK/images" "$MNT"
wait_mounted "$MNT"
L=$MNT/features/resnet50
echo "bench-reload: warming layer4 and layer15 of ${#WARMF[@]} images..." >&2
for f in "${WARMF[@]}"; do cat "$L/layer4/$f" "$L/layer15/$f" >/dev/null; done

echo "bench-reload: $ROUNDS rounds..." >&2
"$PY" "$REPO/scripts/bench_reload.py" --layer "$L/layer4" --warm "${WARMF[@]}" --cold "${COLDF[@]}" \
  --model "$WORK/model.onnx" --versions "$VERSIONS/base.onnx" "$VERSIONS/layer4fc.onnx" --log "$WORK/featurefs-mount.log" \
  --rounds "$ROUNDS" --baseline "$BASELINE"
