#!/usr/bin/env bash
# measures: go.mod cmd fs extractor cache mountopts
# Benchmark: two featurefs builds side by side in one run (a refactoring's
# "no speed change" check, issue 26). OLD and NEW run in interleaved rounds,
# the order alternating each round:
#  1. extract: `featurefs bench --modes extract` of ResNet-50 layer12 on the
#     same 500x375 JPEGs (the extractor alone): images/s and CPU ms/image;
#  2. epoch 1 through a mount: `DatasetFolder(MOUNT/features/tiny/layer0/
#     train, loader=np.load)` over a MinIO bucket of JPEGs with the
#     near-free model of scripts/bench_delivery.py (a fresh cache each
#     pass): images/s and the mount's CPU ms/image;
#  3. scripts/bench-mount.sh with NEW as the mount and OLD as its baseline
#     binary (epoch 2+ against local disk, `ls -l`).
# Prints markdown on stdout: medians with min-max, and NEW/OLD ratios of
# the medians.
#
#   OLD=/path/to/old/featurefs scripts/ab.sh     (NEW: bin/featurefs)
# Env: OLD (required), NEW, AB_ROUNDS (3), AB_JPEGS (64, extract),
#      AB_IMAGES (1000, epoch 1), BENCH_IMAGES / BENCH_LS_ENTRIES (passed on
#      to bench-mount.sh; 256 and 20000 here).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
OLD=${OLD:?OLD=path of the older featurefs binary}
NEW=${NEW:-$BIN}
ROUNDS=${AB_ROUNDS:-3}
BIN=$NEW
need_bin
[ -x "$OLD" ] || { echo "OLD=$OLD is not an executable" >&2; exit 1; }
WORK=$(mktemp -d /tmp/featurefs-ab.XXXXXX)
MNT=$WORK/mnt
MINIO_PID=
trap epoch_cleanup EXIT
mkdir -p "$MNT" "$WORK/minio" "$WORK/extract" "$WORK/epoch"

load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "## Same-run A/B: $(basename "$NEW") vs $(basename "$OLD")"
echo
echo "Command: \`OLD=$OLD NEW=$NEW scripts/ab.sh\` ($(nproc) CPUs, $ROUNDS interleaved rounds). Load average (1, 5, 15 min) $(load) at the start."
echo

# run_kind V FILE (run_rounds, the order alternating): $PHASE's run of build
# V (old: $OLD, new: $NEW), its figures as JSON in FILE.
run_kind() {
  local b=$OLD
  [ "$1" = new ] && b=$NEW
  "$PHASE" "$b" >"$2"
}

# 1. extract
gen_extract_jpegs "$WORK/jpegs" "${AB_JPEGS:-64}" >/dev/null
RESNET=$(model_path resnet50)
extract() {
  "$1" bench --model "$RESNET" --modes extract --layers layer12 --device cpu "$WORK/jpegs" 2>/dev/null |
    "$PY" -c "import json,sys; d=json.loads(sys.stdin.readline()); print(json.dumps({'ips':d['images_per_s'],'cpu':1000*d['cpu_seconds']/d['images']}))"
}
PHASE=extract run_rounds ab-extract "$ROUNDS" "$WORK/extract" old new

# 2. epoch 1 through a mount
IMAGES=${AB_IMAGES:-1000}
CLASSES=10
start_minio "$WORK/minio" "$WORK/minio.log"
"$PY" "$REPO/scripts/gen_dataset.py" --out "$WORK/images" --classes $CLASSES --train $(((IMAGES + CLASSES - 1) / CLASSES)) --val 0 \
  --formats jpg --min-side 375 --max-side 800 >/dev/null 2>&1
rm -f "$WORK/images/manifest.json"
"$PY" "$REPO/scripts/bench_epoch.py" upload --endpoint "$ENDPOINT" --bucket abbench --dir "$WORK/images" >/dev/null
"$PY" "$REPO/scripts/bench_delivery.py" export --out "$WORK/tiny.onnx" 2>/dev/null
epoch() {
  "$PY" "$REPO/scripts/bench_delivery.py" mount --bin "$1" --model "$WORK/tiny.onnx" --layer layer0 --endpoint "$ENDPOINT" \
    --bucket abbench --mnt "$MNT" --cache-dir "$WORK/cache" --log "$WORK/log" --prefetch tree --epochs 1 >"$WORK/out.json" 2>/dev/null
  rm -rf "$WORK/cache"
  "$PY" -c "import json; p=json.load(open('$WORK/out.json'))['passes'][0]; n=p['samples']; print(json.dumps({'ips':n/p['seconds'],'cpu':1000*p['mount_cpu']/n}))"
}
PHASE=epoch run_rounds ab-epoch "$ROUNDS" "$WORK/epoch" old new

bench_py - "$WORK/extract" "$WORK/epoch" <<'EOF'
import glob, json, os, sys
from benchlib import cell, med
names = ["extract (ResNet-50 layer12, the extractor alone)", "epoch 1 through the mount (near-free model, MinIO)"]
print("| benchmark | figure | old median (min-max) | new median (min-max) | new/old |")
print("|---|---|---:|---:|---:|")
for name, d in zip(names, sys.argv[1:]):
    # run_rounds' files: DIR/rR-V.json
    rows = {v: [json.load(open(p)) for p in glob.glob(os.path.join(d, f"r*-{v}.json"))] for v in ("old", "new")}
    for key, label in (("ips", "images/s"), ("cpu", "CPU ms/image")):
        xs = {v: [r[key] for r in rows[v]] for v in rows}
        print(f"| {name} | {label} | {cell(xs['old'])} | {cell(xs['new'])} | {med(xs['new']) / med(xs['old']):.2f}x |")
EOF
echo
echo "Load average at the end of these: $(load)."
echo

# 3. epoch 2+ and ls -l
BENCH_BASELINE_BIN=$OLD BENCH_BASELINE_NAME=old FEATUREFS_BIN=$NEW BENCH_IMAGES=${BENCH_IMAGES:-256} \
  BENCH_LS_ENTRIES=${BENCH_LS_ENTRIES:-20000} bash "$REPO/scripts/bench-mount.sh" 2>/dev/null
