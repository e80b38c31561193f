#!/usr/bin/env bash
# featurefs demo (make demo): generate a small ImageFolder tree, mount it
# through a torchvision ResNet-50 exported with random weights and 4
# augmented views (--augment 4), train a linear head on layer12 features
# with an unmodified PyTorch DatasetFolder + DataLoader (4 workers) for 4
# epochs, then another on the views (epoch e reads layer12-aug/{(e-1) % 4}),
# printing each epoch's time, print a summary, unmount.
#
#   scripts/demo.sh            (after make build; make demo does both)
# Env: DEMO_CLASSES (4), DEMO_TRAIN (12 per class), DEMO_VAL (4), DEMO_KEEP=1
# keeps the work directory.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_bin

WORK=$(mktemp -d /tmp/featurefs-demo.XXXXXX)
MNT=$WORK/mnt
cleanup() {
  local rc=$?
  unmount "$MNT" || echo "demo: could not unmount $MNT" >&2
  if [ $rc -ne 0 ] && [ -f "$WORK/featurefs.log" ]; then
    echo "--- featurefs log (tail)" >&2; tail -n 40 "$WORK/featurefs.log" >&2
  fi
  if [ "${DEMO_KEEP:-0}" = 1 ]; then echo "demo: kept $WORK" >&2; else rm -rf "$WORK"; fi
  exit $rc
}
trap cleanup EXIT
mkdir -p "$MNT"

echo "== 1. images: a generated ImageFolder tree (train/val, JPEG and PNG)"
"$PY" "$REPO/scripts/gen_dataset.py" --out "$WORK/images" --classes "${DEMO_CLASSES:-4}" \
  --train "${DEMO_TRAIN:-12}" --val "${DEMO_VAL:-4}" --min-side 128 --max-side 512
echo "== 2. model: torchvision ResNet-50, random weights, ONNX"
MODEL=$(model_path resnet50)
echo "$MODEL"

# --prefetch dir: a first read extracts its own directory in the background,
# not the whole tree (the default), which for a view tree would also compute
# the views of val/ that training never reads.
echo "== 3. mount: $BIN mount --augment 4 --prefetch dir --model resnet50=... $WORK/images $MNT"
featurefs_mount --augment 4 --prefetch dir --model "resnet50=$MODEL" --cache-dir "$WORK/cache" \
  --log-file "$WORK/featurefs.log" "$WORK/images" "$MNT"
wait_mounted "$MNT"
echo "\$ ls $MNT/features/resnet50"
ls "$MNT/features/resnet50" | tr '\n' ' '; echo
echo "\$ cat $MNT/features/resnet50/layers"
cat "$MNT/features/resnet50/layers"
echo "\$ ls -l $MNT/features/resnet50/layer12/train/$(ls "$WORK/images/train" | head -1) | head -4"
ls -l "$MNT/features/resnet50/layer12/train/$(ls "$WORK/images/train" | head -1)" | head -4
echo "\$ ls $MNT/features/resnet50/layer12-aug"
ls "$MNT/features/resnet50/layer12-aug" | tr '\n' ' '; echo

echo "== 4. train a linear head on layer12 with a PyTorch DataLoader (4 workers), 4 epochs;"
echo "      then one on the 4 views, epoch e reading layer12-aug/{(e-1) % 4}/train"
"$PY" "$REPO/scripts/demo_train.py" "$MNT" --model resnet50 --layer layer12 --epochs 4 --augment 4

echo "== 5. a linear probe over a whole split as one array: arrays/resnet50/layer18/train.npy"
"$PY" - "$MNT" <<'PYEOF'
import sys, time
import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
base = f"{sys.argv[1]}/arrays/resnet50/layer18"
t0 = time.perf_counter()
X = np.load(f"{base}/train.npy", mmap_mode="r")
y = np.load(f"{base}/train.labels.npy")
Xv, yv = np.load(f"{base}/val.npy", mmap_mode="r"), np.load(f"{base}/val.labels.npy")
ok, okv = ~np.isnan(X).any(axis=1), ~np.isnan(Xv).any(axis=1)
t1 = time.perf_counter()
probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(X[ok], y[ok])
t2 = time.perf_counter()
print(f"  train {X.shape} float32 and val {Xv.shape} read in {t1 - t0:.2f} s (layer18 extracted on the way, "
      f"{int((~ok).sum()) + int((~okv).sum())} bad rows of NaN left out)")
print(f"  StandardScaler + LogisticRegression fit in {t2 - t1:.2f} s: val accuracy {probe.score(Xv[okv], yv[okv]):.2f} "
      f"(random weights: chance is {1 / len(set(y.tolist())):.2f})")
PYEOF

echo "== 6. unmount"
unmount "$MNT"
echo "demo: ok"
