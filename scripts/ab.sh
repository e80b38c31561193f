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
#   OLD=/path/to/old/featurefs scripts/bench-ab.sh     (NEW: bin/featurefs)
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
mkdir -p "$MNT" "$WORK/minio"

load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "## Same-run A/B: $(basename "$NEW") vs $(basename "$OLD")"
echo
echo "Command: \`OLD=$OLD NEW=$NEW scripts/bench-ab.sh\` ($(nproc) CPUs, $ROUNDS interleaved rounds). Load average (1, 5, 15 min) $(load) at the start."
echo

# 1. extract
gen_extract_jpegs "$WORK/jpegs" "${AB_JPEGS:-64}" >/dev/null
RESNET=$(model_path resnet50)
: >"$WORK/extract.jsonl"
for ((r = 0; r < ROUNDS; r++)); do
  order=(old new)
  ((r % 2)) && order=(new old)
  for v in "${order[@]}"; do
    b=$OLD
    [ "$v" = new ] && b=$NEW
    "$b" bench --model "$RESNET" --modes extract --layers layer12 --device cpu "$WORK/jpegs" 2>/dev/null |
      "$PY" -c "import json,sys; d=json.loads(sys.stdin.readline()); print(json.dumps({'v':'$v','ips':d['images_per_s'],'cpu':1000*d['cpu_seconds']/d['images']}))" >>"$WORK/extract.jsonl"
  done
done

# 2. epoch 1 through a mount
IMAGES=${AB_IMAGES:-1000}
CLASSES=10
start_minio "$WORK/minio" "$WORK/minio.log"
"$PY" "$REPO/scripts/gen_dataset.py" --out "$WORK/images" --classes $CLASSES --train $(((IMAGES + CLASSES - 1) / CLASSES)) --val 0 \
  --formats jpg --min-side 375 --max-side 800 >/dev/null 2>&1
rm -f "$WORK/images/manifest.json"
"$PY" "$REPO/scripts/bench_epoch.py" upload --endpoint "$ENDPOINT" --bucket abbench --dir "$WORK/images" >/dev/null
"$PY" "$REPO/scripts/bench_delivery.py" export --out "$WORK/tiny.onnx" 2>/dev/null
: >"$WORK/epoch.jsonl"
for ((r = 0; r < ROUNDS; r++)); do
  order=(old new)
  ((r % 2)) && order=(new old)
  for v in "${order[@]}"; do
    b=$OLD
    [ "$v" = new ] && b=$NEW
    "$PY" "$REPO/scripts/bench_delivery.py" mount --bin "$b" --model "$WORK/tiny.onnx" --layer layer0 --endpoint "$ENDPOINT" \
      --bucket abbench --mnt "$MNT" --cache-dir "$WORK/cache" --log "$WORK/log" --prefetch tree --epochs 1 >"$WORK/out.json" 2>/dev/null
    rm -rf "$WORK/cache"
    "$PY" -c "import json; p=json.load(open('$WORK/out.json'))['passes'][0]; n=p['samples']; print(json.dumps({'v':'$v','ips':n/p['seconds'],'cpu':1000*p['mount_cpu']/n}))" >>"$WORK/epoch.jsonl"
  done
done

"$PY" - "$WORK/extract.jsonl" "$WORK/epoch.jsonl" <<'EOF'
import json, statistics, sys
names = ["extract (ResNet-50 layer12, the extractor alone)", "epoch 1 through the mount (near-free model, MinIO)"]
print("| benchmark | figure | old median (min-max) | new median (min-max) | new/old |")
print("|---|---|---:|---:|---:|")
for name, path in zip(names, sys.argv[1:]):
    rows = [json.loads(l) for l in open(path)]
    for key, label in (("ips", "images/s"), ("cpu", "CPU ms/image")):
        med = {}
        cells = []
        for v in ("old", "new"):
            xs = [r[key] for r in rows if r["v"] == v]
            med[v] = statistics.median(xs)
            cells.append(f"{med[v]:.2f} ({min(xs):.2f}-{max(xs):.2f})")
        print(f"| {name} | {label} | {cells[0]} | {cells[1]} | {med['new'] / med['old']:.2f}x |")
EOF
echo
echo "Load average at the end of these: $(load)."
echo

# 3. epoch 2+ and ls -l
BENCH_BASELINE_BIN=$OLD BENCH_BASELINE_NAME=old FEATUREFS_BIN=$NEW BENCH_IMAGES=${BENCH_IMAGES:-256} \
  BENCH_LS_ENTRIES=${BENCH_LS_ENTRIES:-20000} bash "$REPO/scripts/bench-mount.sh" 2>/dev/null
