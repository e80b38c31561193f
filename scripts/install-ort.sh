#!/usr/bin/env bash
# Installs ONNX Runtime for featurefs into $FEATUREFS_DEPS (default
# ~/.cache/featurefs), once, idempotently; scripts/install-deps.sh runs it.
#
#   lib/onnxruntime-1.29.0/libonnxruntime.so.1              the core (CPU; SONAME libonnxruntime.so.1)
#   lib/onnxruntime-1.29.0/libonnxruntime_providers_*.so    the GPU providers (CUDA 13, cuDNN 9; TensorRT 10)
#
# ONNX Runtime loads its providers from the directory of the core library,
# so each version has a directory of its own. The core always; the GPU
# providers (a 179 MB download) when the machine has an NVIDIA GPU
# (/dev/nvidiactl, or nvidia-smi on PATH) or when asked: --gpu or
# FEATUREFS_GPU=1 (FEATUREFS_GPU=0: never). Both come from npm packages
# (npm pack checks each tarball against the registry's integrity hash; the
# script also checks it against the hash pinned here).
#
#   scripts/install-ort.sh [--gpu] [--plan]
#     --plan   print what would be installed and why, one line each, and exit
set -euo pipefail

ORT_VERSION=1.29.0
# npm packages that ship ONNX Runtime $ORT_VERSION for Linux x64.
ORT_CORE_PKG=com.github.asus4.onnxruntime@0.4.9
ORT_GPU_PKG=com.github.asus4.onnxruntime.linux-x64-gpu@0.4.9
# sha512sum of each tarball (the registry's integrity hash, in hex).
ORT_CORE_SHA512=${ORT_CORE_SHA512:-064cf176e499f4891e0cfe90f25cf64c553689eee1492bd2ed921fccca28131a2ad02373267bae19a509ec8b288c182a3b8a2e0f58d76a1f0e63225b08ddbd16}
ORT_GPU_SHA512=${ORT_GPU_SHA512:-168a4884d13f360fafd97eb9c1573d7253c2042be1bc0e771f1a3653429fe5f19d56c0bb88203e999d0a2d6820710023ed3219ea9362751e000b5d20ef85e8eb}
# Where the Linux x64 libraries are inside both tarballs.
ORT_PKG_DIR=package/Plugins/Linux/x64
GPU_FILES=(libonnxruntime_providers_cuda.so libonnxruntime_providers_tensorrt.so libonnxruntime_providers_shared.so)

DEPS=${FEATUREFS_DEPS:-$HOME/.cache/featurefs}
ORT_DIR=$DEPS/lib/onnxruntime-$ORT_VERSION

log() { echo "install-ort: $*" >&2; }

gpu_flag=0 plan=0
for a in "$@"; do
  case $a in
  --gpu) gpu_flag=1 ;;
  --plan) plan=1 ;;
  *) log "unknown argument $a (want --gpu or --plan)"; exit 2 ;;
  esac
done

# gpu_reason prints why the GPU providers are wanted and succeeds, or
# prints why not and fails.
gpu_reason() {
  case ${FEATUREFS_GPU:-} in
  1 | yes | true) echo "FEATUREFS_GPU=$FEATUREFS_GPU"; return 0 ;;
  0 | no | false) echo "FEATUREFS_GPU=$FEATUREFS_GPU"; return 1 ;;
  esac
  if [ "$gpu_flag" = 1 ]; then echo "--gpu"; return 0; fi
  if [ -e /dev/nvidiactl ]; then echo "/dev/nvidiactl exists"; return 0; fi
  if command -v nvidia-smi >/dev/null 2>&1; then echo "nvidia-smi is $(command -v nvidia-smi)"; return 0; fi
  echo "no NVIDIA GPU (no /dev/nvidiactl, no nvidia-smi on PATH; --gpu or FEATUREFS_GPU=1 installs them anyway)"
  return 1
}

have_core() { [ -s "$ORT_DIR/libonnxruntime.so.1" ]; }
have_gpu() {
  local f
  for f in "${GPU_FILES[@]}"; do [ -s "$ORT_DIR/$f" ] || return 1; done
}

want_gpu=0
why=$(gpu_reason) && want_gpu=1

if [ "$plan" = 1 ]; then
  if have_core; then echo "core: installed ($ORT_DIR/libonnxruntime.so.1)"; else echo "core: install ONNX Runtime $ORT_VERSION ($ORT_CORE_PKG) to $ORT_DIR/libonnxruntime.so.1"; fi
  if [ "$want_gpu" = 1 ]; then
    if have_gpu; then echo "gpu: installed ($ORT_DIR; $why)"; else echo "gpu: install the CUDA and TensorRT providers ($ORT_GPU_PKG) to $ORT_DIR ($why)"; fi
  else
    echo "gpu: skip ($why)"
  fi
  exit 0
fi

# fetch PKG SHA512 DIR: npm pack PKG into DIR (npm verifies the tarball
# against the registry's integrity) and check the pinned hash; prints the
# tarball's path.
fetch() {
  local pkg=$1 want=$2 dir=$3 tgz got
  if ! tgz=$(cd "$dir" && npm pack --silent "$pkg" 2>"$dir/npm.log" | tail -1) || [ -z "$tgz" ] || [ ! -s "$dir/$tgz" ]; then
    log "npm pack $pkg failed:"
    grep -v nodedir "$dir/npm.log" >&2 || true
    return 1
  fi
  got=$(sha512sum "$dir/$tgz" | cut -d' ' -f1)
  if [ "$got" != "$want" ]; then
    log "$pkg: sha512 $got, want $want: refusing it"
    return 1
  fi
  echo "$dir/$tgz"
}

mkdir -p "$ORT_DIR"
if ! have_core; then
  log "fetching ONNX Runtime $ORT_VERSION ($ORT_CORE_PKG)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  tgz=$(fetch "$ORT_CORE_PKG" "$ORT_CORE_SHA512" "$tmp")
  tar -xzf "$tgz" -C "$tmp" "$ORT_PKG_DIR/libonnxruntime.so" "$ORT_PKG_DIR/libonnxruntime_providers_shared.so"
  install -m 0644 "$tmp/$ORT_PKG_DIR/libonnxruntime_providers_shared.so" "$ORT_DIR/.libonnxruntime_providers_shared.so.tmp"
  install -m 0644 "$tmp/$ORT_PKG_DIR/libonnxruntime.so" "$ORT_DIR/.libonnxruntime.so.1.tmp"
  [ -s "$ORT_DIR/libonnxruntime_providers_shared.so" ] || mv "$ORT_DIR/.libonnxruntime_providers_shared.so.tmp" "$ORT_DIR/libonnxruntime_providers_shared.so"
  rm -f "$ORT_DIR/.libonnxruntime_providers_shared.so.tmp"
  mv "$ORT_DIR/.libonnxruntime.so.1.tmp" "$ORT_DIR/libonnxruntime.so.1"
  rm -rf "$tmp"
  trap - EXIT
fi

if [ "$want_gpu" = 1 ] && ! have_gpu; then
  log "fetching the ONNX Runtime $ORT_VERSION GPU providers ($ORT_GPU_PKG, 179 MB; $why)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  tgz=$(fetch "$ORT_GPU_PKG" "$ORT_GPU_SHA512" "$tmp")
  members=()
  for f in "${GPU_FILES[@]}"; do members+=("$ORT_PKG_DIR/$f"); done
  tar -xzf "$tgz" -C "$tmp" "${members[@]}"
  for f in "${GPU_FILES[@]}"; do
    install -m 0755 "$tmp/$ORT_PKG_DIR/$f" "$ORT_DIR/.$f.tmp"
    mv "$ORT_DIR/.$f.tmp" "$ORT_DIR/$f"
  done
  rm -rf "$tmp"
  trap - EXIT
  log "GPU providers installed in $ORT_DIR; 'featurefs doctor' shows whether the CUDA libraries are found"
elif [ "$want_gpu" = 0 ]; then
  log "GPU providers not installed: $why"
fi
echo "$ORT_DIR/libonnxruntime.so.1"
