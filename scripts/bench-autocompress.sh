#!/usr/bin/env bash
# measures: go.mod cache fs/features
# Benchmark (issue 49 item 7): --cache-compression auto, chosen per host by
# measurement (docs/CACHE.md, "Compression of file-stored features"). One
# MinIO, three parts; prints one markdown section on stdout, progress on
# stderr.
#  1. Epoch 1 of the near-free model (scripts/bench-delivery.sh's CPU
#     stand-in for a GPU host: a Conv2d whose output is a layer12-sized
#     feature) through a fresh mount and cache, the defaults (`auto`, by
#     measurement) against `--cache-compression off` (issue 49's target:
#     auto within 2% of off's images/s), BENCH_ROUNDS interleaved rounds, the
#     order alternating (bench_delivery.py mount, one epoch): images/s, the
#     mount's CPU per image, the cache's disk per feature after the epoch
#     (its feature files' blocks, without the 256 fan-out directories).
#  2. This build's mount of the same, left idle after its epoch: the cache's
#     disk and its compactions (the stats file) every 2 s until every raw
#     file is compacted, or BENCH_IDLE_MAX seconds.
#  3. A CPU host: ResNet-50 (seeded weights) layer12 on the CPU through this
#     build's mount, defaults, BENCH_R50_IMAGES images read once: the
#     cache's disk per feature when the epoch ends.
#
#   scripts/bench-autocompress.sh   (after make build; scripts/bench.sh runs it)
# Env: BENCH_IMAGES (1000), BENCH_ROUNDS (5),
#      BENCH_IDLE_MAX (300), BENCH_R50_IMAGES (48).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_bin
[ -x "$DEPS/bin/minio" ] || { echo "no $DEPS/bin/minio: run scripts/install-deps.sh" >&2; exit 1; }
BUCKET=autocompress
CLASSES=10
IMAGES=${BENCH_IMAGES:-1000}
ROUNDS=${BENCH_ROUNDS:-5}
IDLE_MAX=${BENCH_IDLE_MAX:-300}
R50=${BENCH_R50_IMAGES:-48}
WORK=$(mktemp -d "/tmp/featurefs-bench-autocompress.XXXXXX")
MNT=$WORK/mnt
MINIO_PID=
trap epoch_cleanup EXIT
mkdir -p "$MNT" "$WORK/minio"
echo "bench-autocompress: $IMAGES JPEGs, $ROUNDS rounds, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
start_minio "$WORK/minio" "$WORK/minio.log"
"$PY" "$REPO/scripts/gen_dataset.py" --out "$WORK/images" --classes "$CLASSES" --train $(((IMAGES + CLASSES - 1) / CLASSES)) \
  --val 0 --formats jpg --min-side 375 --max-side 800 2>/dev/null
rm -f "$WORK/images/manifest.json"
find "$WORK/images/train" -type f | sort | tail -n +$((IMAGES + 1)) | xargs -r rm -f
"$PY" "$REPO/scripts/bench_epoch.py" upload --endpoint "$ENDPOINT" --bucket "$BUCKET" --dir "$WORK/images" >/dev/null
MODEL=$WORK/tiny.onnx
"$PY" "$REPO/scripts/bench_delivery.py" export --out "$MODEL" 2>/dev/null

# run_kind KIND OUT: one epoch through a fresh mount and cache with
# --cache-compression KIND (off or auto); the cache's disk added to its JSON.
run_kind() {
  local kind=$1 out=$2 tag cache
  tag=$(basename "$out" .json)
  cache=$WORK/cache-$tag
  "$PY" "$REPO/scripts/bench_delivery.py" mount --bin "$BIN" --flags "--cache-compression $kind" --model "$MODEL" --layer layer0 --endpoint "$ENDPOINT" \
    --bucket "$BUCKET" --mnt "$MNT" --cache-dir "$cache" --log "$WORK/featurefs-$tag.log" --prefetch tree \
    --epochs 1 >"$out.tmp"
  # the disk of the feature files (their blocks; not the fan-out directories)
  "$PY" - "$out.tmp" "$(find "$cache/files" -type f -printf '%b\n' | awk '{s += $1 * 512} END {print s + 0}')" >"$out" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
r["disk_bytes"] = int(sys.argv[2])
json.dump(r, sys.stdout)
PYEOF
  rm -rf "$cache" "$out.tmp"
}
run_rounds --load bench-autocompress "$ROUNDS" "$WORK" off auto

echo "bench-autocompress: the idle mount" >&2
"$PY" "$REPO/scripts/bench_autocompress.py" watch --bin "$BIN" --model "$MODEL" --layer layer0 --endpoint "$ENDPOINT" \
  --bucket "$BUCKET" --mnt "$MNT" --cache-dir "$WORK/cache-idle" --log "$WORK/featurefs-idle.log" --max "$IDLE_MAX" \
  >"$WORK/idle.json"
rm -rf "$WORK/cache-idle"

echo "bench-autocompress: a CPU host (ResNet-50 layer12, $R50 images)" >&2
"$PY" "$REPO/scripts/gen_dataset.py" --out "$WORK/r50" --classes 2 --train $(((R50 + 1) / 2)) --val 0 \
  --formats jpg --min-side 160 --max-side 640 2>/dev/null
rm -f "$WORK/r50/manifest.json"
"$PY" "$REPO/scripts/bench_epoch.py" upload --endpoint "$ENDPOINT" --bucket r50 --dir "$WORK/r50" >/dev/null
"$PY" "$REPO/scripts/bench_autocompress.py" watch --bin "$BIN" --model "$(model_path resnet50)" --layer layer12 \
  --endpoint "$ENDPOINT" --bucket r50 --mnt "$MNT" --cache-dir "$WORK/cache-r50" --log "$WORK/featurefs-r50.log" \
  --flags "--prefetch off" --max 0 >"$WORK/r50.json"

echo "## --cache-compression auto per host (issue 49 item 7)"
echo
"$PY" "$REPO/scripts/bench_autocompress.py" report "${ROUND_ARGS[@]}" --idle "$WORK/idle.json" --cpuhost "$WORK/r50.json" \
  --env "the cache on $(df --output=source "$WORK" | tail -1) ($(df --output=fstype "$WORK" | tail -1))"
