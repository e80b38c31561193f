#!/usr/bin/env bash
# Benchmark (make bench): second-epoch DataLoader throughput of layer12
# features read through a featurefs mount vs the same .npy files copied to a
# local directory, in one run. Prints one markdown section on stdout (and
# make bench also stores it in docs/bench/mount.md).
#
#   scripts/bench-mount.sh     (after make build)
# Env: BENCH_IMAGES (256), BENCH_REPEATS (7), BENCH_WORKERS (4).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_bin

IMAGES=${BENCH_IMAGES:-256}
REPEATS=${BENCH_REPEATS:-7}
WORKERS=${BENCH_WORKERS:-4}
WORK=$(mktemp -d /tmp/featurefs-bench.XXXXXX)
MNT=$WORK/mnt
cleanup() {
  local rc=$?
  unmount "$MNT" || true
  if [ $rc -ne 0 ] && [ -f "$WORK/featurefs.log" ]; then tail -n 30 "$WORK/featurefs.log" >&2; fi
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT
mkdir -p "$MNT"

"$PY" "$REPO/scripts/gen_dataset.py" --out "$WORK/images" --classes 4 --train $((IMAGES / 4)) --val 0 \
  --min-side 160 --max-side 640 2>/dev/null
MODEL=$(model_path resnet50)
featurefs_mount --model "resnet50=$MODEL" --cache-dir "$WORK/cache" --log-file "$WORK/featurefs.log" \
  "$WORK/images" "$MNT"
wait_mounted "$MNT"
ROOT=$MNT/features/resnet50/layer12/train

echo "bench-mount: epoch 1 over $IMAGES images (extraction)..." >&2
E1=$("$PY" "$REPO/scripts/bench_mount.py" --warm --mount "$ROOT" --local "$ROOT" --workers "$WORKERS")
cp -r "$ROOT" "$WORK/local"
# A restarted mount on the same cache: its first epoch reads every feature
# from the Badger store through FUSE (nothing in the kernel's page cache).
unmount "$MNT"
featurefs_mount --model "resnet50=$MODEL" --cache-dir "$WORK/cache" --log-file "$WORK/featurefs.log" \
  "$WORK/images" "$MNT"
wait_mounted "$MNT"
echo "bench-mount: first epoch after a restart (feature cache)..." >&2
ER=$("$PY" "$REPO/scripts/bench_mount.py" --warm --mount "$ROOT" --local "$ROOT" --workers "$WORKERS")
echo "bench-mount: $REPEATS x (mount epoch, local epoch)..." >&2
"$PY" "$REPO/scripts/bench_mount.py" --mount "$ROOT" --local "$WORK/local" --repeats "$REPEATS" \
  --workers "$WORKERS" --epoch1 "$E1" --restart "$ER" --command "make bench" \
  --env "scripts/bench-mount.sh, BENCH_IMAGES=$IMAGES, $(nproc) CPUs$(command -v nvidia-smi >/dev/null && echo ", $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)")"
