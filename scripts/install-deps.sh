#!/usr/bin/env bash
# Installs everything featurefs needs to build, test and run its demo on a
# fresh Debian 12 machine (as root): apt packages, ONNX Runtime 1.29.0
# (scripts/install-ort.sh: the core library, and its CUDA and TensorRT
# providers on a machine with an NVIDIA GPU or with --gpu /
# FEATUREFS_GPU=1), a MinIO server binary and the Go modules. Idempotent: a
# second run only checks.
#
#   scripts/install-deps.sh [--gpu]
#
# Where things go: $FEATUREFS_DEPS (default ~/.cache/featurefs):
#   lib/onnxruntime-1.29.0/   ONNX Runtime: libonnxruntime.so.1, GPU providers
#   bin/minio                 MinIO server
#   go/                       a Go toolchain, only when none is on PATH
#                             (the golang.org/toolchain module, fetched by
#                             Debian's Go 1.19 from the Go module proxy)
set -euo pipefail

MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
DEPS=${FEATUREFS_DEPS:-$HOME/.cache/featurefs}
mkdir -p "$DEPS/lib" "$DEPS/bin"

log() { echo "install-deps: $*" >&2; }

ort_args=()
for a in "$@"; do
  case $a in
  --gpu) ort_args+=(--gpu) ;;
  *) log "unknown argument $a (want --gpu)"; exit 2 ;;
  esac
done

need_apt=()
# fuse3: mounts; python3-*: the demo, tests and model export (python3-sklearn:
# the array views' linear probe recipe, scripts/array_check.py); gcc, libc6-dev:
# cgo (ONNX Runtime bindings, go test -race); libjpeg62-turbo-dev: libjpeg.a,
# the libjpeg-turbo Pillow decodes with, linked statically (extractor/jpeg.go);
# util-linux: mountpoint(1); podman, runc: the container runtime the image
# and the Kubernetes manifests are tested in (test/podman_test.go: runc
# with cgroupfs, as crun refuses these machines' hybrid cgroups).
for p in fuse3 python3-torch python3-torchvision python3-onnx python3-numpy python3-pil python3-boto3 python3-sklearn \
  iproute2 ca-certificates gcc libc6-dev libjpeg62-turbo-dev make git curl util-linux procps findutils \
  podman runc; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$p")
done
command -v npm >/dev/null || need_apt+=(npm)
if [ ${#need_apt[@]} -gt 0 ]; then
  log "apt-get install ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

# Go: the one on PATH, else a toolchain fetched once into $DEPS/go: Debian's
# Go 1.19 (package golang-1.19-go, which puts no `go` on PATH) downloads the
# golang.org/toolchain module that go.mod names through the Go module proxy.
if ! command -v go >/dev/null; then
  export PATH="$DEPS/go/bin:$PATH"
fi
if ! command -v go >/dev/null; then
  here=$(cd "$(dirname "$0")/.." && pwd)
  gover=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$here/go.mod" 2>/dev/null | head -1)
  gover=${gover:-1.26.8}
  bootstrap=/usr/lib/go-1.19/bin/go
  if [ ! -x "$bootstrap" ]; then
    log "apt-get install golang-1.19-go (to fetch the go$gover toolchain)"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends golang-1.19-go >/dev/null
  fi
  log "no go on PATH: fetching the go$gover toolchain module into $DEPS/go"
  tmp=$(mktemp -d)
  # Outside any module, with a private module cache (its files are read-only).
  dir=$(cd "$tmp" && GOPATH="$tmp/gopath" GOFLAGS=-modcacherw GO111MODULE=on GOTOOLCHAIN=local \
    "$bootstrap" mod download -json "golang.org/toolchain@v0.0.1-go$gover.linux-amd64" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  { [ -n "$dir" ] && [ -f "$dir/bin/go" ]; } || { log "fetching the go$gover toolchain failed"; exit 1; }
  rm -rf "$DEPS/go"
  cp -r "$dir" "$DEPS/go"
  chmod +x "$DEPS"/go/bin/* "$DEPS"/go/pkg/tool/*/*
  chmod -R u+w "$tmp"; rm -rf "$tmp"
  go version >&2
fi

ORT_LIB=$(FEATUREFS_DEPS=$DEPS bash "$(dirname "$0")/install-ort.sh" "${ort_args[@]}")

if [ ! -x "$DEPS/bin/minio" ]; then
  log "building minio $MINIO_VERSION (takes a few minutes)"
  GOBIN="$DEPS/bin" GOFLAGS=-mod=mod go install "github.com/minio/minio@$MINIO_VERSION"
fi

if [ -f go.mod ]; then
  go mod download
fi
log "ok: FEATUREFS_ORT_LIB=$ORT_LIB MINIO=$DEPS/bin/minio"
