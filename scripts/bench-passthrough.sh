#!/usr/bin/env bash
# measures: go.mod cmd fs cache
# Benchmark of FUSE passthrough (issue 37 item 4): readback (epoch 1's read of
# features prefetch cached), hot (epoch 2, page cache warm) and epoch2 (page
# cache dropped) with --passthrough on and off, interleaved rounds; see
# scripts/bench_passthrough.py. Needs root (drop_caches, passthrough) and a
# kernel >= 6.9 for passthrough itself.
#
#   scripts/bench-passthrough.sh     (after make build)
# Env: BENCH_PT_IMAGES (400), BENCH_ROUNDS (3), BENCH_PT_READERS (4).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_bin
IMAGES=${BENCH_PT_IMAGES:-400}
ROUNDS=${BENCH_ROUNDS:-3}
pt_unmount() { umount "$WORK/mnt" 2>/dev/null; }
bench_work bench-pt pt_unmount
mkdir -p "$WORK/mnt"
echo "bench-passthrough: $IMAGES JPEGs, $ROUNDS rounds, load $(cut -d' ' -f1-3 /proc/loadavg), kernel $(uname -r)" >&2
"$PY" "$REPO/scripts/gen_dataset.py" --out "$WORK/images" --classes 10 --train $(((IMAGES + 9) / 10)) \
  --val 0 --formats jpg --min-side 375 --max-side 800 2>/dev/null
rm -f "$WORK/images/manifest.json"
"$PY" "$REPO/scripts/bench_delivery.py" export --out "$WORK/tiny.onnx" 2>/dev/null
"$PY" "$REPO/scripts/bench_passthrough.py" --bin "$BIN" --model "$WORK/tiny.onnx" --images "$WORK/images/train" \
  --mnt "$WORK/mnt" --cache-dir "$WORK/cache" --work "$WORK" --rounds "$ROUNDS" --readers "${BENCH_PT_READERS:-4}"
