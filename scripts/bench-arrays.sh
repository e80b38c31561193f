#!/usr/bin/env bash
# measures: go.mod cmd fs extractor cache
# Benchmark (issue 50): array views. BENCH_ARRAY_ROWS JPEGs (500x375, in 10
# class directories) of a local source, the near-free pool2048 model
# (scripts/bench_arrays.py), in BENCH_ROUNDS interleaved rounds:
#  - epoch 1: a fresh mount and cache, one in-order pass over
#    arrays/pool2048/layer2/train.npy (np.load, mmap_mode="r"), against
#    `featurefs extract` of the same images: images/s and CPU per image;
#  - cached: with that mount, the whole array read cold (page cache
#    dropped) and hot, against the same array as a local .npy and against
#    DatasetFolder + np.stack of the per-file views.
# Prints a markdown section (docs/bench/arrays.md); progress on stderr.
#
#   scripts/bench-arrays.sh     (after make build; root: FUSE, drop_caches)
# Env: BENCH_ARRAY_ROWS (10000), BENCH_ROUNDS (3).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
ROWS=${BENCH_ARRAY_ROWS:-10000}
ROUNDS=${BENCH_ROUNDS:-3}
for v in ROWS ROUNDS; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$v=${!v}: want a positive integer" >&2; exit 1; }
done
need_bin
WORK=$(mktemp -d "/tmp/featurefs-bench-arrays.XXXXXX")
MNT=$WORK/mnt
MINIO_PID=
trap epoch_cleanup EXIT
mkdir -p "$MNT" "$WORK/out"
A="$PY $REPO/scripts/bench_arrays.py"
MODEL=$WORK/pool2048.onnx
$A export --out "$MODEL" 2>/dev/null
echo "bench-arrays: $ROWS images..." >&2
gen_extract_jpegs "$WORK/distinct" 200
for ((i = 0; i < ROWS; i++)); do
  c=$((i % 10))
  mkdir -p "$WORK/src/train/c$c"
  cp "$WORK/distinct/$(printf %04d $((i % 200))).jpg" "$WORK/src/train/c$c/$(printf %06d "$i").jpg"
done
ARRAY=$MNT/arrays/pool2048/layer2/train.npy
ARGS=()
for ((r = 0; r < ROUNDS; r++)); do
  rotated "$r" array1 extract
  spec=()
  for kind in "${ROTATED[@]}"; do
    out=$WORK/out/r$r-$kind.json
    echo "bench-arrays: round $((r + 1))/$ROUNDS: $kind (load $(cut -d' ' -f1 /proc/loadavg))..." >&2
    case $kind in
    array1)
      rm -rf "$WORK/cache"
      featurefs_mount --model "pool2048=$MODEL" --cache-dir "$WORK/cache" --log-file "$WORK/featurefs.log" --device cpu "$WORK/src" "$MNT" 2>/dev/null
      wait_mounted "$MNT"
      $A epoch1 --array "$ARRAY" --pid "${MOUNT_PIDS[$MNT]}" --out "$out" ;;
    extract)
      $A extract --bin "$BIN" --model "$MODEL" --layer layer2 --src "$WORK/src/train" --out "$out" ;;
    esac
    spec+=("$kind=$out")
  done
  "$PY" -c 'import numpy as np, sys; np.save(sys.argv[2], np.array(np.load(sys.argv[1], mmap_mode="r")))' "$ARRAY" "$WORK/local.npy"
  rotated "$r" array local perfile
  for kind in "${ROTATED[@]}"; do
    out=$WORK/out/r$r-$kind.json
    echo "bench-arrays: round $((r + 1))/$ROUNDS: cached $kind..." >&2
    case $kind in
    array) $A cached --kind array --path "$ARRAY" --out "$out" ;;
    local) $A cached --kind local --path "$WORK/local.npy" --out "$out" ;;
    perfile) $A cached --kind perfile --path "$MNT/features/pool2048/layer2/train" --out "$out" ;;
    esac
    spec+=("$kind=$out")
  done
  unmount "$MNT"
  ARGS+=(--round "${spec[@]}")
done
$A report "${ARGS[@]}"
