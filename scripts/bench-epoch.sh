#!/usr/bin/env bash
# measures: go.mod cmd fs extractor cache
# Benchmark (make bench): 3 epochs of transfer learning on ResNet-50 layer12
# features, the way a user does it today with PyTorch alone (boto3 + torchvision
# transforms + the frozen trunk in torch every epoch) vs featurefs (a
# DatasetFolder over MOUNT/features/resnet50/layer12), with --prefetch tree and
# --prefetch off, all in one run against one local MinIO: BENCH_ROUNDS
# interleaved rounds, each running the three in an order that rotates every
# round (baseline, tree, off; then tree, off, baseline; then off, baseline,
# tree), each featurefs run with a fresh mount and a fresh cache directory.
# Prints one markdown section on stdout (make bench also stores it in
# docs/bench/epoch.md): medians over the rounds with min-max, verdicts from
# the medians of per-round ratios, and epochs 2+ with the defaults vs
# --prefetch off with the FUSE reads the mount saw in each; progress on stderr.
#
#   scripts/bench-epoch.sh     (after make build)
# Env: BENCH_IMAGES (200), BENCH_ROUNDS (3; fewer than 3 gives figures but no
#      verdict), BENCH_CLASSES (4), BENCH_WORKERS (4), BENCH_THREADS (2).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
BUCKET=epochs
epoch_setup "$BUCKET" epoch prefetch

COMMON=(--endpoint "$ENDPOINT" --bucket "$BUCKET" --workers "$WORKERS" --threads "$THREADS")
# run_kind KIND OUT: one run of baseline, tree or off; its JSON in OUT.
run_kind() {
  local kind=$1 out=$2 tag
  if [ "$kind" = baseline ]; then
    "$PY" "$REPO/scripts/bench_epoch.py" baseline "${COMMON[@]}" >"$out"
    return
  fi
  tag=$(basename "$out" .json)
  "$PY" "$REPO/scripts/bench_epoch.py" featurefs "${COMMON[@]}" --bin "$BIN" --model "$MODEL" --mnt "$MNT" \
    --cache-dir "$WORK/cache-$tag" --log "$WORK/featurefs-$tag.log" --prefetch "$kind" --device cpu >"$out"
  rm -rf "$WORK/cache-$tag"
}
run_rounds bench-epoch "$ROUNDS" "$WORK" baseline tree off

"$PY" "$REPO/scripts/bench_epoch.py" report "${ROUND_ARGS[@]}" --classes "$CLASSES" --cpus "$(nproc)" \
  --image-desc "JPEG, sides 160-640 px"
