#!/usr/bin/env bash
# measures: go.mod cmd fs extractor cache
# Benchmark (make bench; issue 41): augmented views through a mount, in one run.
#  (a) The first pass over K views costs K extractions per image and no more:
#      a fresh `featurefs mount --augment K` of a local directory of generated
#      images, one DataLoader epoch of an unmodified DatasetFolder over each
#      view tree layer0-aug/0..K-1/train; the stats file's extractions must be
#      K x images (and 0 after a remount), and the pass's time per
#      view-image is set against a plain-tree first pass in the same round.
#  (b) An epoch over a cached view tree reads at the plain tree's speed:
#      after a remount on the same cache (its files' pages dropped), one
#      epoch of layer0-aug/k/train vs one of layer0/train read through FUSE
#      from the feature cache, then BENCH_AUGMENT_EPOCHS epochs of each from
#      the page cache.
# BENCH_ROUNDS interleaved rounds (orders rotating every round), each with a
# fresh mount and cache directory; the near-free tiny model of
# scripts/bench_delivery.py (scripts/bench_augment.py says what each step
# reads). Prints one markdown section on stdout (make bench stores it in
# docs/bench/augment.md); progress on stderr.
#
#   scripts/bench-augment.sh     (after make build)
# Env: BENCH_AUGMENT_IMAGES (320), BENCH_AUGMENT_VIEWS (4: K),
#      BENCH_ROUNDS (3; fewer than 3 gives figures but no verdict),
#      BENCH_AUGMENT_EPOCHS (5: page-cache epochs of each tree a round),
#      BENCH_AUGMENT_CLASSES (4), BENCH_WORKERS (4: DataLoader workers).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
IMAGES=${BENCH_AUGMENT_IMAGES:-320}
VIEWS=${BENCH_AUGMENT_VIEWS:-4}
ROUNDS=${BENCH_ROUNDS:-3}
EPOCHS=${BENCH_AUGMENT_EPOCHS:-5}
CLASSES=${BENCH_AUGMENT_CLASSES:-4}
WORKERS=${BENCH_WORKERS:-4}
for v in IMAGES VIEWS ROUNDS EPOCHS CLASSES WORKERS; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$v=${!v}: want a positive integer" >&2; exit 1; }
done
need_bin
# the help text first, then grep (grep -q's early exit would SIGPIPE featurefs)
grep -q -- "-augment" <<<"$("$BIN" mount -h 2>&1)" || { echo "$BIN has no --augment flag: rebuild (make build)" >&2; exit 1; }
WORK=$(mktemp -d /tmp/featurefs-bench-augment.XXXXXX)
MNT=$WORK/mnt
MINIO_PID= # no MinIO: epoch_cleanup (lib.sh) unmounts, tails the logs on failure, removes WORK
trap epoch_cleanup EXIT
mkdir -p "$MNT"
MODEL=$WORK/tiny.onnx
"$PY" "$REPO/scripts/bench_delivery.py" export --out "$MODEL" 2>/dev/null
grep -q "^0 *layer0 .*802816" <<<"$("$BIN" layers "$MODEL")" || { echo "the tiny model's layer0 is not 802,816 bytes" >&2; exit 1; }
PER_CLASS=$(((IMAGES + CLASSES - 1) / CLASSES))
"$PY" "$REPO/scripts/gen_dataset.py" --out "$WORK/images" --classes "$CLASSES" --train "$PER_CLASS" --val 0 \
  --formats jpg --min-side 160 --max-side 640 2>/dev/null
rm -f "$WORK/images/manifest.json"
IMAGES=$((PER_CLASS * CLASSES))

ARGS=()
for ((r = 1; r <= ROUNDS; r++)); do
  echo "bench-augment: round $r/$ROUNDS (load $(cut -d' ' -f1 /proc/loadavg))..." >&2
  "$PY" "$REPO/scripts/bench_augment.py" round --bin "$BIN" --model "$MODEL" --src "$WORK/images" --mnt "$MNT" \
    --cache-dir "$WORK/cache-r$r" --log "$WORK/featurefs-r$r.log" --views "$VIEWS" --round "$r" \
    --epochs "$EPOCHS" --workers "$WORKERS" >"$WORK/r$r.json"
  rm -rf "$WORK/cache-r$r"
  ARGS+=(--round "$WORK/r$r.json")
done

"$PY" "$REPO/scripts/bench_augment.py" report "${ARGS[@]}" --workers "$WORKERS" \
  --image-desc "$CLASSES classes, JPEG, sides 160-640 px"
