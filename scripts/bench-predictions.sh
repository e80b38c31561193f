#!/usr/bin/env bash
# measures: go.mod cmd fs extractor cache
# Benchmark: predictions (issue 28 item 3, docs/MODELS.md) against reading
# the same images' last-layer features, ResNet-50 (random weights) on the
# CPU, one directory of PRED_IMAGES 500x375 JPEGs. Each of PRED_ROUNDS
# rounds, the order of the first two alternating:
#  1. cold predictions: `cat MOUNT/predictions/r50/cls/predictions.jsonl`
#     on a fresh cache;
#  2. cold features: `cat MOUNT/features/r50/layer19/cls/*.npy` (fc, the
#     layer predictions read) on a fresh cache;
#  3. warm predictions: a new mount on 1.'s cache, the same cat;
#  4. featurefs warm --predictions OUT.jsonl on a fresh cache, then the
#     rerun (every key in OUT: 0 predicted).
# Every mount uses the default --prefetch tree. Prints markdown: medians
# with min-max, and ratios of the medians.
#
#   scripts/bench-predictions.sh     Env: PRED_IMAGES (96), PRED_ROUNDS (3)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_bin
N=${PRED_IMAGES:-96}
ROUNDS=${PRED_ROUNDS:-3}
cleanup() { unmount "$MNT" >/dev/null 2>&1; }
bench_work pred cleanup
MNT=$WORK/mnt
mkdir -p "$MNT" "$WORK/src"
gen_extract_jpegs "$WORK/src/cls" "$N" >/dev/null
R50=$(model_path resnet50)
secs() { local s e; s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N); "$PY" -c "print(f'{$e-$s:.3f}')"; }
mnt() { featurefs_mount --model "r50=$R50" --device cpu --cache-dir "$1" --log-file "$WORK/mount.log" "$WORK/src" "$MNT" 2>/dev/null; }

echo "## Predictions: predictions.jsonl and warm --predictions vs the last layer's features"
echo
echo "$ROUNDS rounds, PRED_IMAGES=$N 500x375 JPEGs in one directory, ResNet-50 random weights on the CPU, fresh caches."
echo
declare -A T=()
add() { T[$1]="${T[$1]:-} $2"; }
for ((r = 0; r < ROUNDS; r++)); do
  rotated "$r" pred npy # the order alternating
  for what in "${ROTATED[@]}"; do
    mnt "$WORK/cache-$what-$r"
    if [ "$what" = pred ]; then
      add pred "$(secs cat "$MNT/predictions/r50/cls/predictions.jsonl")"
    else
      add npy "$(secs sh -c "cat '$MNT'/features/r50/layer19/cls/*.npy")"
    fi
    unmount "$MNT"
  done
  mnt "$WORK/cache-pred-$r"
  add predwarm "$(secs cat "$MNT/predictions/r50/cls/predictions.jsonl")"
  unmount "$MNT"
  out=$WORK/out-$r.jsonl
  w() { "$BIN" warm --source "$WORK/src" --model "r50=$R50" --device cpu --cache-dir "$WORK/wcache-$r" --predictions "$out" >/dev/null 2>&1; }
  add warm "$(secs w)"
  add rerun "$(secs w)"
  [ "$(wc -l <"$out")" -eq "$N" ] || { echo "warm --predictions wrote $(wc -l <"$out") lines, want $N" >&2; exit 1; }
done
bench_py - "$N" "${T[pred]}" "${T[npy]}" "${T[predwarm]}" "${T[warm]}" "${T[rerun]}" <<'PYEOF'
import sys
import benchlib
n = int(sys.argv[1])
rows = dict(zip(["pred", "npy", "predwarm", "warm", "rerun"], [[float(v) for v in a.split()] for a in sys.argv[2:]]))
med = {k: benchlib.med(v) for k, v in rows.items()}
names = {
    "npy": "cold: `cat features/r50/layer19/cls/*.npy` (baseline)",
    "pred": "cold: `cat predictions/r50/cls/predictions.jsonl`",
    "predwarm": "warm cache (a new mount): `cat predictions.jsonl`",
    "warm": "`featurefs warm --predictions` (no mount, fresh cache)",
    "rerun": "its rerun (every key in OUT: 0 predicted)",
}
print("| run | seconds, median | min-max | images/s | vs cold features |")
print("|---|---:|---:|---:|---:|")
for k in ["npy", "pred", "predwarm", "warm", "rerun"]:
    v = rows[k]
    print(f"| {names[k]} | {med[k]:.3f} | {min(v):.3f}-{max(v):.3f} | {n/med[k]:.1f} | {med[k]/med['npy']:.2f}x |")
print()
print("Seconds per round: " + "; ".join(f"{k} " + ", ".join(f"{x:.3f}" for x in rows[k]) for k in rows) + ".")
PYEOF
