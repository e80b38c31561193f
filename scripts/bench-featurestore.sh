#!/usr/bin/env bash
# measures: go.mod cmd fs extractor cache
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
BUCKET=images
epoch_setup "$BUCKET" fstore feature-store
"$PY" - "$ENDPOINT" <<'PYEOF'
import sys, boto3
boto3.client("s3", endpoint_url=sys.argv[1]).create_bucket(Bucket="features")
PYEOF
STORE=(--feature-store s3://features/bench)
COMMON=(--endpoint "$ENDPOINT" --bucket "$BUCKET" --workers "$WORKERS" --threads "$THREADS" --epochs 1
  --bin "$BIN" --model "$MODEL" --mnt "$MNT" --prefetch tree --device cpu)

# The first host: computes every feature and fills the store (its unmount
# waits for the queued writes).
echo "bench-featurestore: filling the feature store..." >&2
"$PY" "$REPO/scripts/bench_epoch.py" featurefs "${COMMON[@]}" --cache-dir "$WORK/cache-fill" \
  --log "$WORK/featurefs-fill.log" --extra "${STORE[*]}" >"$WORK/fill.json"
rm -rf "$WORK/cache-fill"
# What the store holds: its feature objects' count and bytes (compressed
# unless --feature-store-compression off).
"$PY" - "$ENDPOINT" >"$WORK/objects.json" <<'PYEOF'
import json, sys, boto3
n = size = 0
for page in boto3.client("s3", endpoint_url=sys.argv[1]).get_paginator("list_objects_v2").paginate(Bucket="features", Prefix="bench/"):
    for o in page.get("Contents", []):
        if o["Key"].endswith(".npy"):
            n, size = n + 1, size + o["Size"]
print(json.dumps({"objects": n, "bytes": size}))
PYEOF

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
run_rounds bench-featurestore "$ROUNDS" "$WORK" compute store
"$PY" "$REPO/scripts/bench_featurestore.py" --fill "$WORK/fill.json" --objects "$WORK/objects.json" "${ROUND_ARGS[@]}"
