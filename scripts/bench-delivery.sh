#!/usr/bin/env bash
# measures: go.mod cmd fs extractor cache
# Benchmark (make bench; issue 25): the mount's delivery path with a model
# that costs almost nothing, the CPU stand-in for a GPU host. A Conv2d(3, 64,
# 4, stride=4) + ReLU (ONNX, opset 17, dynamic batch) whose output is the
# size of a ResNet-50 layer12 feature (802,816 bytes); ImageNet-like JPEGs
# (375-800 px, 10 class directories) in a local MinIO bucket. In one run,
# BENCH_ROUNDS interleaved rounds, each running, in an order that rotates
# every round: tree (epoch 1 and 2 of DataLoader(batch_size=64, shuffle,
# num_workers=4) over a fresh mount with a fresh cache directory, the
# defaults), off (the same with --prefetch off), s2 (the defaults with
# --cache-compression s2, every feature compressed: the default before issue
# 37 item 2), extract (`featurefs bench
# --modes extract`, the extractor alone, on the local copy), decode (`featurefs
# bench --modes decode`, decode + preprocess alone: the CPU ceiling) and
# torch (ImageFolder + PIL + the same model in torch, 2 workers). Prints one
# markdown section on stdout (make bench stores it in docs/bench/delivery.md):
# medians over the rounds with min-max, the load average, the mount's CPU per
# image and the stats file's breakdown, targets with verdicts; progress on
# stderr. ResNet-50 layer12/layer18 figures: scripts/bench-epoch.sh and
# bench-extract.sh.
#
#   scripts/bench-delivery.sh     (after make build)
# Env: BENCH_DELIVERY_IMAGES (2000; fewer for a quick run), BENCH_ROUNDS (3;
#      fewer than 3 gives figures but no verdict), BENCH_DELIVERY_EPOCHS (2),
#      BENCH_DELIVERY_MOUNT_FLAGS (more mount flags for both mount runs, e.g.
#      "--cache-compression zeros"; the report's text does not name them).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
BUCKET=delivery
CLASSES=10
LAYER=layer0 # the tiny model's one layer (featurefs layers MODEL)
IMAGES=${BENCH_DELIVERY_IMAGES:-2000}
EPOCHS=${BENCH_DELIVERY_EPOCHS:-2}
[[ $IMAGES =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_DELIVERY_IMAGES=$IMAGES: want a positive integer" >&2; exit 1; }
[[ $EPOCHS =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_DELIVERY_EPOCHS=$EPOCHS: want a positive integer" >&2; exit 1; }
# epoch_setup generates BENCH_IMAGES JPEGs of 160-640 px in 4 classes for
# ResNet-50; this benchmark wants its own, so it sets up the rest itself.
need_bin
"$PY" -c 'import boto3' 2>/dev/null || { echo "$PY lacks boto3: run scripts/install-deps.sh" >&2; exit 1; }
[ -x "$DEPS/bin/minio" ] || { echo "no $DEPS/bin/minio: run scripts/install-deps.sh" >&2; exit 1; }
ROUNDS=${BENCH_ROUNDS:-3}
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_ROUNDS=$ROUNDS: want a positive integer" >&2; exit 1; }
WORK=$(mktemp -d "/tmp/featurefs-bench-delivery.XXXXXX")
MNT=$WORK/mnt
MINIO_PID=
trap epoch_cleanup EXIT
mkdir -p "$MNT" "$WORK/minio"
echo "bench-delivery: $IMAGES JPEGs, $ROUNDS rounds, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
start_minio "$WORK/minio" "$WORK/minio.log"
"$PY" "$REPO/scripts/gen_dataset.py" --out "$WORK/images" --classes "$CLASSES" --train $(((IMAGES + CLASSES - 1) / CLASSES)) \
  --val 0 --formats jpg --min-side 375 --max-side 800 2>/dev/null
rm -f "$WORK/images/manifest.json"
# exactly IMAGES: drop the last ones of the rounding up
find "$WORK/images/train" -type f | sort | tail -n +$((IMAGES + 1)) | xargs -r rm -f
"$PY" "$REPO/scripts/bench_epoch.py" upload --endpoint "$ENDPOINT" --bucket "$BUCKET" --dir "$WORK/images" >/dev/null
MODEL=$WORK/tiny.onnx
"$PY" "$REPO/scripts/bench_delivery.py" export --out "$MODEL" 2>/dev/null
grep -q "^0 *$LAYER .*802816" <<<"$("$BIN" layers "$MODEL")" || { echo "the tiny model's $LAYER is not 802,816 bytes" >&2; exit 1; }

# run_kind KIND OUT: one run of tree, off, s2, extract, decode or torch; its JSON in OUT.
run_kind() {
  local kind=$1 out=$2 tag
  tag=$(basename "$out" .json)
  case $kind in
  tree | off | s2)
    local prefetch=$kind flags=
    [ "$kind" = s2 ] && prefetch=tree flags="--cache-compression s2"
    "$PY" "$REPO/scripts/bench_delivery.py" mount --bin "$BIN" --model "$MODEL" --layer "$LAYER" --endpoint "$ENDPOINT" \
      --bucket "$BUCKET" --mnt "$MNT" --cache-dir "$WORK/cache-$tag" --log "$WORK/featurefs-$tag.log" --prefetch "$prefetch" \
      --flags "$flags" --epochs "$EPOCHS" >"$out"
    rm -rf "$WORK/cache-$tag" ;;
  extract | decode)
    "$PY" "$REPO/scripts/bench_delivery.py" cli --bin "$BIN" --model "$MODEL" --layer "$LAYER" --mode "$kind" \
      --dir "$WORK/images/train" >"$out" ;;
  torch)
    "$PY" "$REPO/scripts/bench_delivery.py" torch --dir "$WORK/images/train" >"$out" ;;
  esac
}
run_rounds --load bench-delivery "$ROUNDS" "$WORK" tree off s2 extract decode torch
[ -n "${BENCH_DELIVERY_KEEP:-}" ] && cp "$WORK"/r*.json "$BENCH_DELIVERY_KEEP"/

"$PY" "$REPO/scripts/bench_delivery.py" report "${ROUND_ARGS[@]}" --classes "$CLASSES" --layer "$LAYER" \
  --image-desc "JPEG, sides 375-800 px"
