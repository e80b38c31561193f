#!/usr/bin/env bash
# Benchmark (make bench): a second training host's epoch 1 reading ResNet-50
# layer12 features from the feature store (--feature-store, filled once by a
# first host) vs computing them itself, on this machine, against one local
# MinIO that holds both the images and the feature store. BENCH_ROUNDS
# interleaved rounds, the order alternating (compute, store; then store,
# compute); each run is a fresh mount with a fresh cache directory training
# the same linear head as scripts/bench-epoch.sh for one epoch. Prints one
# markdown section on stdout (docs/bench/featurestore.md): medians with
# min-max, the ratio from the median of per-round ratios, and the bytes
# fetched per sample; progress on stderr.
#
#   scripts/bench-featurestore.sh     (after make build)
# Env: BENCH_IMAGES (200), BENCH_ROUNDS (3), BENCH_CLASSES (4), BENCH_WORKERS (4),
#      BENCH_THREADS (2).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_bin
"$PY" -c 'import boto3' 2>/dev/null || { echo "$PY lacks boto3: run scripts/install-deps.sh" >&2; exit 1; }
MINIO_BIN=$DEPS/bin/minio
[ -x "$MINIO_BIN" ] || { echo "no $MINIO_BIN: run scripts/install-deps.sh" >&2; exit 1; }
"$BIN" mount -h 2>&1 | grep -q -- '-feature-store' || { echo "$BIN has no --feature-store flag: rebuild (make build)" >&2; exit 1; }

IMAGES=${BENCH_IMAGES:-200}
ROUNDS=${BENCH_ROUNDS:-3}
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_ROUNDS=$ROUNDS: want a positive integer" >&2; exit 1; }
CLASSES=${BENCH_CLASSES:-4}
WORKERS=${BENCH_WORKERS:-4}
THREADS=${BENCH_THREADS:-2}
BUCKET=images
WORK=$(mktemp -d /tmp/featurefs-bench-fstore.XXXXXX)
MNT=$WORK/mnt
MINIO_PID=
cleanup() {
  local rc=$?
  unmount "$MNT" || true
  if [ -n "$MINIO_PID" ]; then kill "$MINIO_PID" 2>/dev/null || true; wait "$MINIO_PID" 2>/dev/null || true; fi
  if [ $rc -ne 0 ]; then
    for f in "$WORK"/featurefs-*.log "$WORK/minio.log"; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }; done
  fi
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT
mkdir -p "$MNT" "$WORK/minio"

start_minio "$WORK/minio" "$WORK/minio.log"

PER_CLASS=$(( (IMAGES + CLASSES - 1) / CLASSES ))
"$PY" "$REPO/scripts/gen_dataset.py" --out "$WORK/images" --classes "$CLASSES" --train "$PER_CLASS" --val 0 \
  --formats jpg --min-side 160 --max-side 640 2>/dev/null
rm -f "$WORK/images/manifest.json"
"$PY" "$REPO/scripts/bench_epoch.py" upload --endpoint "$ENDPOINT" --bucket "$BUCKET" --dir "$WORK/images" >/dev/null
"$PY" - "$ENDPOINT" <<'PYEOF'
import sys, boto3
boto3.client("s3", endpoint_url=sys.argv[1]).create_bucket(Bucket="features")
PYEOF
MODEL=$(model_path resnet50)
STORE=(--feature-store s3://features/bench)
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
COMMON=(--endpoint "$ENDPOINT" --bucket "$BUCKET" --workers "$WORKERS" --threads "$THREADS" --epochs 1
  --bin "$BIN" --model "$MODEL" --mnt "$MNT" --prefetch tree --device cpu)

# The first host: computes every feature and fills the store (its unmount
# waits for the queued writes).
echo "bench-featurestore: filling the feature store..." >&2
"$PY" "$REPO/scripts/bench_epoch.py" featurefs "${COMMON[@]}" --cache-dir "$WORK/cache-fill" \
  --log "$WORK/featurefs-fill.log" --extra "${STORE[*]}" >"$WORK/fill.json"
rm -rf "$WORK/cache-fill"

# run_kind KIND OUT: a second host's epoch 1, computing (compute) or from the
# feature store (store, --feature-store-only: it computes nothing).
run_kind() {
  local kind=$1 out=$2 tag extra=""
  tag=$(basename "$out" .json)
  [ "$kind" = store ] && extra="${STORE[*]} --feature-store-only"
  "$PY" "$REPO/scripts/bench_epoch.py" featurefs "${COMMON[@]}" --cache-dir "$WORK/cache-$tag" \
    --log "$WORK/featurefs-$tag.log" --extra "$extra" >"$out"
  rm -rf "$WORK/cache-$tag"
}
KINDS=(compute store)
ROUND_ARGS=()
for ((r = 0; r < ROUNDS; r++)); do
  k=$((r % 2))
  order=("${KINDS[@]:k}" "${KINDS[@]:0:k}")
  spec=()
  for kind in "${order[@]}"; do
    echo "bench-featurestore: round $((r + 1))/$ROUNDS: $kind..." >&2
    run_kind "$kind" "$WORK/r$((r + 1))-$kind.json"
    spec+=("$kind=$WORK/r$((r + 1))-$kind.json")
  done
  ROUND_ARGS+=(--round "${spec[@]}")
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
"$PY" "$REPO/scripts/bench_featurestore.py" --fill "$WORK/fill.json" "${ROUND_ARGS[@]}" \
  --env "scripts/bench-featurestore.sh, BENCH_IMAGES=$IMAGES, BENCH_ROUNDS=$ROUNDS, $(nproc) CPUs (nproc), load average $LOAD_BEFORE before, $LOAD_AFTER after"
