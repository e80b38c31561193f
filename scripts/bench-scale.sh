#!/usr/bin/env bash
# measures: go.mod cmd fs cache
# Benchmark (make bench; issue 27): datasets as they are kept at scale.
#  1. An ImageNet-shaped local source (BENCH_SCALE_ENTRIES JPEG-named files in
#     1,000 class directories, hard links to one small JPEG): the DatasetFolder
#     scan of MOUNT/features/tiny/layer0/train vs the same scan of the source
#     directory, first and second; the mount's RSS (VmRSS) and stats
#     fs.metadata_bytes after the scans and after 2 epochs of
#     BENCH_SCALE_SAMPLES random samples read with np.load.
#  2. A MinIO bucket of BENCH_SCALE_OBJECTS empty objects (1,000 per class
#     prefix): the first full listing through a fresh mount (a DatasetFolder
#     scan) and `ls -l` of a 1,000-entry directory, against a direct boto3
#     list of the same prefix; and BENCH_SCALE_FLAT more under one prefix
#     flat/: the mount's first `ls` of it against a boto3 list of it.
#  3. The same BENCH_SCALE_IMAGES generated JPEGs (10 classes, 375-800 px) as
#     loose objects and as one tar per class in MinIO: `featurefs warm
#     --source` images/s and MinIO's GetObject count per sample, the
#     ceilings (warm of the same images as a local directory: no store;
#     `featurefs bench --modes decode`: decode + preprocess alone), and the
#     features of both compared byte for byte through a mount of each.
# Each in BENCH_ROUNDS interleaved rounds (the order rotating every round),
# the near-free tiny model of scripts/bench_delivery.py. Prints three
# markdown sections on stdout (make bench stores them in docs/bench/scale.md);
# progress on stderr.
#
#   scripts/bench-scale.sh     (after make build)
# Env: BENCH_SCALE_ENTRIES (200000; the issue's figure is 1000000),
#      BENCH_SCALE_SAMPLES (10000), BENCH_SCALE_OBJECTS (100000),
#      BENCH_SCALE_FLAT (50000), BENCH_SCALE_IMAGES (2000), BENCH_SCALE_CLASSES (10: section 3's
#      classes, one tar each), BENCH_ROUNDS (3; fewer than 3 gives figures
#      but no verdict), BENCH_SCALE_SECTIONS ("1 2 3": which to run),
#      BENCH_SCALE_IDLE (30,120,240: seconds after section 1's epochs at
#      which RSS and the stats are read), BENCH_SCALE_PREFETCH (off: section
#      1's mount gets --prefetch off, as the published figures were taken;
#      dir or tree: that --prefetch; default: no --prefetch at all, the
#      mount's default, tree, its prefetch left running through the epochs
#      and the idle wait), BENCH_SCALE_KEEP (a directory: section 1's per-run
#      JSON files, 1 s traces included, are copied there).
# Section 1's mount runs carry a 1 s trace (scripts/bench_scale.py scan
# --pid) of VmRSS, the C heap's resident memory (smaps: [heap], glibc's
# arenas, mmapped chunks) and the stats file's memory section, through the
# scans, the epochs and the idle wait: the report gives its maximum.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
ENTRIES=${BENCH_SCALE_ENTRIES:-200000}
SAMPLES=${BENCH_SCALE_SAMPLES:-10000}
OBJECTS=${BENCH_SCALE_OBJECTS:-100000}
FLAT=${BENCH_SCALE_FLAT:-50000}
IMAGES=${BENCH_SCALE_IMAGES:-2000}
ROUNDS=${BENCH_ROUNDS:-3}
CLASSES=${BENCH_SCALE_CLASSES:-10}
SECTIONS=" ${BENCH_SCALE_SECTIONS:-1 2 3} "
IDLE=${BENCH_SCALE_IDLE:-30,120,240}
PREFETCH=${BENCH_SCALE_PREFETCH:-off}
case $PREFETCH in
off | dir | tree) PREFETCH_ARGS=(--prefetch "$PREFETCH") ;;
default) PREFETCH_ARGS=() ;;
*) echo "BENCH_SCALE_PREFETCH=$PREFETCH: want off, dir, tree or default" >&2; exit 1 ;;
esac
[[ $IDLE =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "BENCH_SCALE_IDLE=$IDLE: want seconds, comma-separated" >&2; exit 1; }
for v in ENTRIES SAMPLES OBJECTS FLAT IMAGES ROUNDS CLASSES; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$v=${!v}: want a positive integer" >&2; exit 1; }
done
SCAN_CLASSES=$(( ENTRIES >= 1000 ? 1000 : 1 ))
OBJ_CLASSES=$(( (OBJECTS + 999) / 1000 ))
need_bin
"$PY" -c 'import boto3' 2>/dev/null || { echo "$PY lacks boto3: run scripts/install-deps.sh" >&2; exit 1; }
[ -x "$DEPS/bin/minio" ] || { echo "no $DEPS/bin/minio: run scripts/install-deps.sh" >&2; exit 1; }
WORK=$(mktemp -d "/tmp/featurefs-bench-scale.XXXXXX")
MNT=$WORK/mnt
MINIO_PID=
trap epoch_cleanup EXIT
mkdir -p "$MNT" "$WORK/minio"
MODEL=$WORK/tiny.onnx
"$PY" "$REPO/scripts/bench_delivery.py" export --out "$MODEL" 2>/dev/null
grep -q "^0 *layer0 .*802816" <<<"$("$BIN" layers "$MODEL")" || { echo "the tiny model's layer0 is not 802,816 bytes" >&2; exit 1; }
# MinIO's request counters, read without credentials (section 3's GETs).
export MINIO_PROMETHEUS_AUTH_TYPE=public
start_minio "$WORK/minio" "$WORK/minio.log"
S="$PY $REPO/scripts/bench_scale.py"

mkdir -p "$WORK/s1" "$WORK/s2" "$WORK/s3"
# want N: whether section N is in BENCH_SCALE_SECTIONS.
want() { [[ $SECTIONS == *" $1 "* ]]; }

# 1. The local ImageNet-shaped source.
if want 1; then
echo "bench-scale: a local source of $ENTRIES entries..." >&2
"$PY" -c 'import sys; from PIL import Image; Image.new("RGB", (64, 48), (90, 140, 200)).save(sys.argv[1], quality=90)' "$WORK/one.jpg"
$S tree --out "$WORK/src" --entries "$ENTRIES" --classes "$SCAN_CLASSES" --jpeg "$WORK/one.jpg" >/dev/null
run_kind() {
  local kind=$1 out=$2 tag pid
  tag=$(basename "$out" .json)
  case $kind in
  source) $S scan --root "$WORK/src/train" --ext .jpg >"$out" ;;
  mount)
    featurefs_mount --model "tiny=$MODEL" --cache-dir "$WORK/cache-$tag" --log-file "$WORK/featurefs-$tag.log" \
      --device cpu "${PREFETCH_ARGS[@]}" "$WORK/src" "$MNT" 2>/dev/null
    wait_mounted "$MNT"
    pid=${MOUNT_PIDS[$MNT]}
    $S scan --root "$MNT/features/tiny/layer0/train" --ext .npy --pid "$pid" --mnt "$MNT" --samples "$SAMPLES" --idle "$IDLE" >"$out"
    unmount "$MNT"
    rm -rf "$WORK/cache-$tag" ;;
  esac
}
run_rounds --load bench-scale-local "$ROUNDS" "$WORK/s1" source mount
[ -n "${BENCH_SCALE_KEEP:-}" ] && cp "$WORK"/s1/*.json "$BENCH_SCALE_KEEP"/
rm -rf "$WORK/src"
$S report "${ROUND_ARGS[@]/#--round/--scan}" --classes "$SCAN_CLASSES" --prefetch "$PREFETCH"
echo
fi

# 2. A bucket of OBJECTS objects.
if want 2; then
echo "bench-scale: uploading $OBJECTS + $FLAT objects..." >&2
UP=$($S upload-empty --endpoint "$ENDPOINT" --bucket many --entries "$OBJECTS" --classes "$OBJ_CLASSES")
UP_S=$("$PY" -c 'import json,sys; print(json.loads(sys.argv[1])["seconds"])' "$UP")
$S upload-empty --endpoint "$ENDPOINT" --bucket many --entries "$FLAT" --classes 1 --flat flat >/dev/null
LS_DIR=$(printf 'c%04d' $((OBJ_CLASSES / 2)))
run_kind() {
  local kind=$1 out=$2 tag
  tag=$(basename "$out" .json)
  case $kind in
  mount)
    $S s3mount --bin "$BIN" --model "$MODEL" --endpoint "$ENDPOINT" --bucket many --mnt "$MNT" \
      --cache-dir "$WORK/cache-$tag" --log "$WORK/featurefs-$tag.log" --dir "$LS_DIR" --flat flat >"$out"
    rm -rf "$WORK/cache-$tag" ;;
  list) $S s3list --endpoint "$ENDPOINT" --bucket many --prefix train/ >"$out" ;;
  prefix) $S s3list --endpoint "$ENDPOINT" --bucket many --prefix "train/$LS_DIR/" >"$out" ;;
  flat) $S s3list --endpoint "$ENDPOINT" --bucket many --prefix flat/ >"$out" ;;
  esac
}
run_rounds --load bench-scale-s3 "$ROUNDS" "$WORK/s2" mount list prefix flat
$S report "${ROUND_ARGS[@]/#--round/--s3}" --upload-s "$UP_S"
echo
fi

# 3. Archives vs loose objects.
if want 3; then
echo "bench-scale: $IMAGES JPEGs, loose and packed..." >&2
"$PY" "$REPO/scripts/gen_dataset.py" --out "$WORK/images" --classes "$CLASSES" --train $(((IMAGES + CLASSES - 1) / CLASSES)) \
  --val 0 --formats jpg --min-side 375 --max-side 800 2>/dev/null
rm -f "$WORK/images/manifest.json"
$S upload-dir --endpoint "$ENDPOINT" --bucket loose --dir "$WORK/images" >/dev/null
$S pack --dir "$WORK/images" --out "$WORK/packed" >/dev/null
$S upload-dir --endpoint "$ENDPOINT" --bucket packed --dir "$WORK/packed" >/dev/null
run_kind() {
  local kind=$1 out=$2 tag src
  tag=$(basename "$out" .json)
  case $kind in
  decode) "$BIN" bench --model "$MODEL" --modes decode --layers layer0 --device cpu "$WORK/images" 2>/dev/null >"$out" ;;
  *) # loose, packed: a bucket; local: the images' directory (no store)
    src=(--bucket "$kind")
    [ "$kind" = local ] && src=(--bucket none --source "$WORK/images")
    $S warm --bin "$BIN" --model "$MODEL" --endpoint "$ENDPOINT" "${src[@]}" --cache-dir "$WORK/cache-$tag" >"$out"
    rm -rf "$WORK/cache-$tag" ;;
  esac
}
run_rounds --load bench-scale-archives "$ROUNDS" "$WORK/s3" loose packed local decode
# byte-identical features: the first files of one class through a mount of each
mkdir -p "$WORK/mnt2"
featurefs_mount --model "tiny=$MODEL" --cache-dir "$WORK/cache-a" --log-file "$WORK/featurefs-a.log" --device cpu \
  --prefetch off --endpoint-url "$ENDPOINT" s3://loose "$MNT" 2>/dev/null
featurefs_mount --model "tiny=$MODEL" --cache-dir "$WORK/cache-b" --log-file "$WORK/featurefs-b.log" --device cpu \
  --prefetch off --endpoint-url "$ENDPOINT" s3://packed "$WORK/mnt2" 2>/dev/null
wait_mounted "$MNT"; wait_mounted "$WORK/mnt2"
CLS=$(ls "$WORK/images/train" | head -1)
SAME=$($S same --a "$MNT/features/tiny/layer0/train/$CLS" --b "$WORK/mnt2/features/tiny/layer0/train/$CLS" --n 5)
unmount "$WORK/mnt2"; unmount "$MNT"
$S report "${ROUND_ARGS[@]/#--round/--warm}" --same "$SAME" --classes "$CLASSES"
fi
