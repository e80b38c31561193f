# Shared helpers for scripts/demo.sh and scripts/bench-*.sh (source it).
# shellcheck shell=bash

PY=/usr/bin/python3
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEPS=${FEATUREFS_DEPS:-$HOME/.cache/featurefs}
export FEATUREFS_ORT_LIB=${FEATUREFS_ORT_LIB:-$DEPS/lib/libonnxruntime.so.1}
BIN=${FEATUREFS_BIN:-$REPO/bin/featurefs}

# model_path NAME: a torchvision model exported with random seeded weights
# (scripts/export_model.py), cached in $DEPS/models under the same name the
# Go tests use (testenv.Model), exported once under a file lock.
model_path() {
  local name=$1 sum out
  sum=$(sha256sum "$REPO/scripts/export_model.py" | cut -c1-8)
  out="$DEPS/models/$name-$sum.onnx"
  mkdir -p "$DEPS/models"
  if [ ! -s "$out" ]; then
    echo "exporting $name (random weights) to $out" >&2
    flock "$out.lock" sh -c "[ -s '$out' ] || '$PY' '$REPO/scripts/export_model.py' --model '$name' --out '$out'" >&2
  fi
  echo "$out"
}

# wait_mounted DIR [SECONDS]: wait until DIR is a mount point.
wait_mounted() {
  local dir=$1 t=${2:-180} i
  for ((i = 0; i < t * 10; i++)); do
    mountpoint -q "$dir" && return 0
    sleep 0.1
  done
  echo "$dir not mounted after ${t}s" >&2
  return 1
}

# unmount DIR: umount and wait until it is gone.
unmount() {
  local dir=$1 i
  mountpoint -q "$dir" || return 0
  umount "$dir" 2>/dev/null || fusermount3 -u "$dir" 2>/dev/null || true
  for ((i = 0; i < 300; i++)); do
    mountpoint -q "$dir" || return 0
    sleep 0.1
  done
  umount -l "$dir" 2>/dev/null || true
  return 1
}

# need_bin: fail unless the featurefs binary and the dependencies are there.
need_bin() {
  [ -x "$BIN" ] || { echo "no $BIN: run 'make build' (or make demo)" >&2; exit 1; }
  [ -s "$FEATUREFS_ORT_LIB" ] || { echo "no $FEATUREFS_ORT_LIB: run scripts/install-deps.sh" >&2; exit 1; }
  "$PY" -c 'import torch, torchvision, numpy, PIL' 2>/dev/null ||
    { echo "$PY lacks torch/torchvision/numpy/PIL: run scripts/install-deps.sh" >&2; exit 1; }
}
