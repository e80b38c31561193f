#!/usr/bin/env bash
# measures: go.mod cmd fs cache
# Benchmark (make bench): the mount's own overhead, in one run.
#  1. Second-epoch DataLoader throughput of layer12 features read through a
#     featurefs mount vs the same .npy files copied to a local directory.
#  2. `ls -l` of a directory of BENCH_LS_ENTRIES entries through a mount of a
#     local-directory source vs that directory itself.
# Prints two markdown sections on stdout (make bench stores them in
# docs/bench/mount.md).
#
#   scripts/bench-mount.sh     (after make build)
# Env: BENCH_IMAGES (256), BENCH_REPEATS (7), BENCH_WORKERS (4),
#      BENCH_TTL (1s: the mount's --metadata-ttl for epoch 2+, shorter than
#      an epoch, as it is for any dataset larger than a few thousand images),
#      BENCH_LS_ENTRIES (65000), BENCH_LS_ROUNDS (5),
#      BENCH_BASELINE_BIN (another featurefs binary, e.g. an older build, to
#      measure side by side in the same rounds; its name in the tables is
#      BENCH_BASELINE_NAME, default "baseline").
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_bin

IMAGES=${BENCH_IMAGES:-256}
REPEATS=${BENCH_REPEATS:-7}
WORKERS=${BENCH_WORKERS:-4}
TTL=${BENCH_TTL:-1s}
LS_ENTRIES=${BENCH_LS_ENTRIES:-65000}
LS_ROUNDS=${BENCH_LS_ROUNDS:-5}
BASE_BIN=${BENCH_BASELINE_BIN:-}
BASE_NAME=${BENCH_BASELINE_NAME:-baseline}
WORK=$(mktemp -d /tmp/featurefs-bench.XXXXXX)
MNT=$WORK/mnt
BMNT=$WORK/mnt-base
cleanup() {
  local rc=$? m
  for m in "$MNT" "$BMNT" "$WORK/mnt-ls" "$WORK/mnt-ls-base"; do unmount "$m" || true; done
  if [ $rc -ne 0 ] && [ -f "$WORK/featurefs.log" ]; then tail -n 30 "$WORK/featurefs.log" >&2; fi
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT
mkdir -p "$MNT" "$BMNT" "$WORK/mnt-ls" "$WORK/mnt-ls-base"
# What the sections say of the setup beyond the harness's stamp: a GPU (the
# mounts' default --device auto uses it) and the baseline's binary.
SETUP=
if command -v nvidia-smi >/dev/null; then
  SETUP="GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
fi
if [ -n "$BASE_BIN" ]; then SETUP+="${SETUP:+; }$BASE_NAME: \`$BASE_BIN\`"; fi

# rn50_mount CACHE LOG ARGS... SOURCE DIR: featurefs_mount of ResNet-50 with
# the cache directory CACHE and the log file LOG, then wait until DIR is
# mounted (BIN=$BASE_BIN rn50_mount: the baseline's binary).
rn50_mount() {
  local cache=$1 log=$2
  shift 2
  featurefs_mount --model "resnet50=$MODEL" --cache-dir "$cache" --log-file "$log" "$@"
  wait_mounted "${!#}"
}

# warm_epoch ROOT: one epoch over ROOT (bench_mount.py --warm), its JSON.
warm_epoch() { "$PY" "$REPO/scripts/bench_mount.py" --warm --mount "$1" --workers "$WORKERS"; }

"$PY" "$REPO/scripts/gen_dataset.py" --out "$WORK/images" --classes 4 --train $((IMAGES / 4)) --val 0 \
  --min-side 160 --max-side 640 2>/dev/null
MODEL=$(model_path resnet50)
rn50_mount "$WORK/cache" "$WORK/featurefs.log" "$WORK/images" "$MNT"
ROOT=$MNT/features/resnet50/layer12/train

echo "bench-mount: epoch 1 over $IMAGES images (extraction)..." >&2
E1=$(warm_epoch "$ROOT")
cp -r "$ROOT" "$WORK/local"
cp -r "$ROOT" "$WORK/local-written"
# The local copy's pages are written back, dropped and read back, as a
# dataset on disk is after its first epoch (the kernel does not drop dirty
# pages: without the write-back, before 2026-12-07, the copy kept the
# pages cp wrote); local-written keeps the pages cp wrote.
bench_py -c 'import sys, benchlib; benchlib.drop_pages(sys.argv[1])' "$WORK/local"
cat "$WORK"/local/*/*.npy >/dev/null
# A restarted mount on the same cache: its first epoch reads every feature
# from the Badger store through FUSE (nothing in the kernel's page cache).
unmount "$MNT"
if [ -n "$BASE_BIN" ]; then cp -r "$WORK/cache" "$WORK/cache-base"; fi
rn50_mount "$WORK/cache" "$WORK/featurefs.log" --metadata-ttl "$TTL" "$WORK/images" "$MNT"
echo "bench-mount: first epoch after a restart (feature cache)..." >&2
ER=$(warm_epoch "$ROOT")
BASE_ARGS=(--stats "mount=$MNT/.featurefs/stats")
if [ -n "$BASE_BIN" ]; then
  BIN=$BASE_BIN rn50_mount "$WORK/cache-base" "$WORK/featurefs-base.log" --metadata-ttl "$TTL" "$WORK/images" "$BMNT"
  warm_epoch "$BMNT/features/resnet50/layer12/train" >/dev/null
  BASE_ARGS+=(--baseline "$BASE_NAME=$BMNT/features/resnet50/layer12/train" --stats "$BASE_NAME=$BMNT/.featurefs/stats")
fi
echo "bench-mount: $REPEATS rounds of epochs..." >&2
"$PY" "$REPO/scripts/bench_mount.py" --mount "$ROOT" --local "$WORK/local" --local-written "$WORK/local-written" \
  "${BASE_ARGS[@]}" --repeats "$REPEATS" --workers "$WORKERS" --epoch1 "$E1" --restart "$ER" --ttl "$TTL" \
  --env "$SETUP"
unmount "$MNT"
if [ -n "$BASE_BIN" ]; then unmount "$BMNT"; fi
echo

# ls -l of one large directory: empty .jpg files (listing reads no content).
echo "bench-mount: ls -l of $LS_ENTRIES entries..." >&2
mkdir -p "$WORK/lsdir/big"
(cd "$WORK/lsdir/big" && seq -f "img%05g.jpg" 0 $((LS_ENTRIES - 1)) | xargs touch)
rn50_mount "$WORK/cache-ls" "$WORK/featurefs.log" --prefetch off "$WORK/lsdir" "$WORK/mnt-ls"
LS_ARGS=(--mount "featurefs mount=$WORK/mnt-ls/features/resnet50/layer12/big")
if [ -n "$BASE_BIN" ]; then
  BIN=$BASE_BIN rn50_mount "$WORK/cache-ls-base" "$WORK/featurefs-base.log" --prefetch off "$WORK/lsdir" "$WORK/mnt-ls-base"
  LS_ARGS+=(--mount "featurefs $BASE_NAME=$WORK/mnt-ls-base/features/resnet50/layer12/big")
fi
"$PY" "$REPO/scripts/bench_ls.py" --local "$WORK/lsdir/big" "${LS_ARGS[@]}" --rounds "$LS_ROUNDS" \
  --env "$SETUP"
