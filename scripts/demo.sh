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

echo "== 5. unmount"
unmount "$MNT"
echo "demo: ok"
