#!/usr/bin/env bash
# The first GPU session of issue 38 (JPEG decode on the GPU), in one script:
# on a fresh GPU host with this repository copied, it ships what the host
# lacks (featurefs, ONNX Runtime's core and its GPU providers), says what the
# host's python environment holds for nvJPEG, then runs gpu-check's decode
# step and decode throughput comparison (docs/GPU.md, "JPEG decode on the
# GPU") within GPU38_BUDGET_S seconds (480 by default), and writes every
# result under $OUT:
#
#   $OUT/nvjpeg.txt         libnvjpeg* in the python environments, CUDA
#                           toolkits and the loader's cache; its version
#                           (nvjpegGetProperty); whether torchvision decodes
#                           a JPEG on the GPU; featurefs doctor's head
#   $OUT/nvjpeg-test.txt    the binding's own GPU test (TestNVJPEGOnGPU,
#                           when nvjpeg.test.gz was carried)
#   $OUT/results.jsonl      each figure as it is measured (survives a cut)
#   $OUT/gpu-38.md          the report (docs/bench/gpu.md's section); when
#                           the budget cut the run, the decode section made
#                           from results.jsonl (verdicts need 3 rounds)
#   $OUT/gpu-check.log      gpu-check's progress and errors
#   $OUT/logs.tar.gz        the extract, bench and mount logs and the stats
#                           files (at most 12 MB; the images are left out)
#
# What travels. A call's working tree is at most 64 MiB, and the GPU
# package of ONNX Runtime is a 179 MB tarball, so it travels in parts over
# several calls; each call stashes what it carries in $GPU38_STASH
# (/var/tmp/featurefs-gpu38, kept while the machine stays warm between
# calls) and the last one, when every part is there, installs and runs.
# Prepare here, once (the core and the binary gzipped, the tarball split
# into parts small enough to travel beside the 4.5 MB tree):
#
#   echo /.gpu38/ >>.git/info/exclude; mkdir -p .gpu38/1 .gpu38/2 .gpu38/3 .gpu38/4
#   make build && gzip -c bin/featurefs >.gpu38/4/featurefs.gz
#   go test -tags gpu -c -o /tmp/nvjpeg.test ./extractor/ && gzip -c /tmp/nvjpeg.test >.gpu38/4/nvjpeg.test.gz
#   gzip -c ~/.cache/featurefs/lib/onnxruntime-1.29.0/libonnxruntime.so.1 >.gpu38/4/libonnxruntime.so.1.gz
#   # the GPU package's tarball, fetched as scripts/install-ort.sh fetches it (npm pack
#   # com.github.asus4.onnxruntime.linux-x64-gpu@0.4.9; its sha512 is pinned there):
#   split -b 56M -d com.github.asus4.onnxruntime.linux-x64-gpu-0.4.9.tgz ort-gpu.tgz.part-
#   mv ort-gpu.tgz.part-00 .gpu38/1/; mv ort-gpu.tgz.part-01 .gpu38/2/
#   mv ort-gpu.tgz.part-02 .gpu38/3/; mv ort-gpu.tgz.part-03 .gpu38/4/
#
# (60 MiB parts do not fit: 60 MiB plus the tree is over 64 MiB.) Then the
# calls, each `bash scripts/gpu-session-38.sh` with one folder carried:
#
#   run(carry=[".gpu38/1"], command="bash scripts/gpu-session-38.sh", timeout_s=120)
#   run(carry=[".gpu38/2"], command="bash scripts/gpu-session-38.sh", timeout_s=120)
#   run(carry=[".gpu38/3"], command="bash scripts/gpu-session-38.sh", timeout_s=120)
#   run(carry=[".gpu38/4"], command="bash scripts/gpu-session-38.sh", timeout_s=540)
#
# Make the calls back to back: an H200 is kept only 30 s after a call, and
# a fresh machine has an empty stash (a call's STAGED line says what the
# stash holds, so a gap shows as parts missing again). A call that finds
# parts missing stashes what it carried, says what it has and what is
# missing, and exits 0 in seconds ("STAGED"); the order of the calls does
# not matter. A call on a host where everything is installed
# already (a rerun on the same warm machine) carries nothing and runs. Where
# the host's python has the GPU providers' libraries some other way, or
# featurefs finds an installed ONNX Runtime GPU (FEATUREFS_ORT_LIB naming a
# core with libonnxruntime_providers_cuda.so beside it), no part is needed.
#
# Planned time on an H100/H200 (16 cores): about 40 s to export the model
# and make the sets, 100 s for the decode step (three extract runs of
# 1,100 images, the PyTorch reference and the pixel comparison), then about
# 110 s a round of the throughput comparison (seven processes, each paying
# its session set-up: cuDNN's algorithm search, the batch-size measurement),
# so 3 rounds end near 470 s; the budget stops it at 480 s, and a round cut
# short still leaves its figures in results.jsonl and the report.
#
# Env: GPU38_BUDGET_S (480: gpu-check is stopped after this many seconds
# from the script's start), GPU38_STEPS (decode,decode-throughput),
# GPU38_ROUNDS (3), GPU38_IMAGES (2000: the extractor's set),
# GPU38_E2E_IMAGES (4000, from GPU38_E2E_UNIQUE 2000 distinct JPEGs),
# GPU38_DECODE_IMAGES (1000), GPU38_ORT_TIME (2s: each bare ONNX Runtime
# measurement), GPU38_STASH, GPU38_PARTS_DIRS (.gpu38/*: where carried
# parts are looked for). GPU_CHECK_REHEARSAL=1
# rehearses it on a machine without a GPU (bin/featurefs and the CPU ONNX
# Runtime of this machine, tiny sets, no part needed).
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO" || exit 1
OUT=${OUT:-$REPO/.gpu38-out}
mkdir -p "$OUT"
STASH=${GPU38_STASH:-/var/tmp/featurefs-gpu38}
REHEARSAL=${GPU_CHECK_REHEARSAL:-0}
ORT_VERSION=1.29.0
# the GPU package's sha512 and where its libraries are: scripts/install-ort.sh's
# (ORT_GPU_SHA512 in the environment wins, as it does there)
ORT_GPU_SHA512=${ORT_GPU_SHA512:-$(sed -n 's/^ORT_GPU_SHA512=\${ORT_GPU_SHA512:-\([0-9a-f]*\)}$/\1/p' scripts/install-ort.sh)}
ORT_PKG_DIR=$(sed -n 's/^ORT_PKG_DIR=//p' scripts/install-ort.sh)
GPU_FILES=(libonnxruntime_providers_cuda.so libonnxruntime_providers_tensorrt.so libonnxruntime_providers_shared.so)
T0=$(date +%s)
say() { echo "gpu-session-38: $*" | tee -a "$OUT/session.log" >&2; }
[ -n "$ORT_GPU_SHA512" ] && [ -n "$ORT_PKG_DIR" ] || { say "cannot read ORT_GPU_SHA512/ORT_PKG_DIR from scripts/install-ort.sh"; exit 1; }

# 1. Stash what this call carried.
mkdir -p "$STASH/parts" "$STASH/bin" "$STASH/deps/lib/onnxruntime-$ORT_VERSION"
ORT_DIR=$STASH/deps/lib/onnxruntime-$ORT_VERSION
for d in ${GPU38_PARTS_DIRS:-.gpu38/*}; do
  [ -d "$d" ] || continue
  for f in "$d"/*; do
    [ -f "$f" ] || continue
    case $(basename "$f") in
    featurefs.gz) gzip -dc "$f" >"$STASH/bin/.featurefs.tmp" && chmod 755 "$STASH/bin/.featurefs.tmp" && mv "$STASH/bin/.featurefs.tmp" "$STASH/bin/featurefs" ;;
    featurefs) install -m 755 "$f" "$STASH/bin/featurefs" ;;
    nvjpeg.test.gz) gzip -dc "$f" >"$STASH/bin/.nvjpeg.tmp" && chmod 755 "$STASH/bin/.nvjpeg.tmp" && mv "$STASH/bin/.nvjpeg.tmp" "$STASH/bin/nvjpeg.test" ;;
    libonnxruntime.so.1.gz) gzip -dc "$f" >"$ORT_DIR/.core.tmp" && mv "$ORT_DIR/.core.tmp" "$ORT_DIR/libonnxruntime.so.1" ;;
    libonnxruntime.so.1) install -m 644 "$f" "$ORT_DIR/libonnxruntime.so.1" ;;
    *.part-*) cp "$f" "$STASH/parts/.tmp" && mv "$STASH/parts/.tmp" "$STASH/parts/$(basename "$f")" ;;
    *) say "ignoring $f (want featurefs[.gz], nvjpeg.test.gz, libonnxruntime.so.1[.gz] or *.part-*)"; continue ;;
    esac || { say "could not stash $f"; exit 1; }
    say "stashed $f ($(stat -c %s "$f") bytes)"
  done
done

# 2. What is still missing?
BIN=
for b in "$STASH/bin/featurefs" "$REPO/bin/featurefs"; do [ -x "$b" ] && { BIN=$b; break; }; done
if [ "$REHEARSAL" = 1 ]; then
  ORT_LIB=${FEATUREFS_ORT_LIB:-$HOME/.cache/featurefs/lib/onnxruntime-$ORT_VERSION/libonnxruntime.so.1}
  say "REHEARSAL (GPU_CHECK_REHEARSAL=1): no GPU, no parts; $ORT_LIB and ${BIN:-no binary}: NOT GPU FIGURES"
else
  ORT_LIB=${FEATUREFS_ORT_LIB:-$ORT_DIR/libonnxruntime.so.1}
  have_gpu() { for f in "${GPU_FILES[@]}"; do [ -s "$(dirname "$ORT_LIB")/$f" ] || return 1; done; }
  if ! have_gpu && compgen -G "$STASH/parts/*.part-*" >/dev/null; then
    got=$(cat $(ls "$STASH"/parts/*.part-* | sort) | sha512sum | cut -d' ' -f1)
    if [ "$got" = "$ORT_GPU_SHA512" ]; then
      tmp=$(mktemp -d)
      members=()
      for f in "${GPU_FILES[@]}"; do members+=("$ORT_PKG_DIR/$f"); done
      if cat $(ls "$STASH"/parts/*.part-* | sort) | tar -xzf - -C "$tmp" "${members[@]}"; then
        for f in "${GPU_FILES[@]}"; do install -m 0755 "$tmp/$ORT_PKG_DIR/$f" "$ORT_DIR/$f"; done
        rm -rf "$tmp" "$STASH/parts"
        say "ONNX Runtime's GPU providers installed in $ORT_DIR from the parts (sha512 as scripts/install-ort.sh pins)"
      else
        rm -rf "$tmp"
        say "the joined parts match the sha512 but do not extract"
        exit 1
      fi
    else
      say "STAGED: parts $(cd "$STASH/parts" && ls | tr '\n' ' ')($(du -cb "$STASH"/parts/*.part-* | tail -1 | cut -f1) bytes): their join is not the GPU package yet (sha512 differs): carry the next part"
    fi
  fi
  missing=()
  [ -n "$BIN" ] || missing+=("featurefs (featurefs.gz)")
  [ -s "$ORT_LIB" ] || missing+=("ONNX Runtime's core ($ORT_LIB; libonnxruntime.so.1.gz)")
  have_gpu || missing+=("ONNX Runtime's GPU providers (the remaining *.part-* of the GPU package)")
  if [ ${#missing[@]} -gt 0 ]; then
    say "STAGED: still missing: ${missing[*]}; stash $STASH holds: $(cd "$STASH" && find . -type f | tr '\n' ' ')"
    exit 0
  fi
fi
[ -n "$BIN" ] || { say "no featurefs binary (bin/featurefs or a carried featurefs.gz)"; exit 1; }

# 3. What the host holds for nvJPEG, one short look (docs/GPU.md's search order).
# the python gpu-check picks: FEATUREFS_PY, else the first with torch
PY=${FEATUREFS_PY:-}
if [ -z "$PY" ]; then
  for p in $(type -ap python3) /usr/bin/python3; do
    "$p" -c 'import torch, torchvision, numpy, PIL' >/dev/null 2>&1 && { PY=$p; break; }
  done
fi
[ -n "$PY" ] || { say "no python3 with torch, torchvision, numpy and PIL (set FEATUREFS_PY)"; exit 1; }
{
  echo "# nvJPEG on this host ($(date -u +%FT%TZ)); python3 is $PY"
  "$PY" - <<'PYEOF'
import ctypes, glob, os, site, sys
dirs = []
try:
    import nvidia
    dirs += [os.path.join(p, "*", "lib") for p in nvidia.__path__]
except Exception as e:
    print(f"import nvidia: {type(e).__name__}: {e}")
for s in site.getsitepackages():
    dirs += [os.path.join(s, "torch", "lib"), os.path.join(s, "torchvision"), os.path.join(s, "torchvision.libs"),
             os.path.join(s, "nvidia", "*", "lib")]
dirs += ["/usr/local/cuda*/lib64", "/usr/local/cuda*/targets/*/lib", "/usr/lib/x86_64-linux-gnu", "/usr/local/nvidia/lib64"]
found = sorted({f for d in dirs for f in glob.glob(os.path.join(d, "libnvjpeg*"))})
print("libnvjpeg files:" if found else "libnvjpeg files: none in " + ", ".join(dirs))
for f in found:
    print(f"  {f} ({os.path.getsize(f)} bytes)")
for f in found:
    if ".so" not in f:
        continue
    try:
        lib = ctypes.CDLL(f)
        v = []
        for t in range(3):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
            x = ctypes.c_int()
            lib.nvjpegGetProperty(t, ctypes.byref(x))
            v.append(x.value)
        print(f"  {f}: nvjpegGetProperty {v[0]}.{v[1]}.{v[2]}")
    except Exception as e:
        print(f"  {f}: {type(e).__name__}: {e}")
try:
    import io, torch, torchvision
    from PIL import Image
    from torchvision.io import decode_jpeg
    b = io.BytesIO(); Image.new("RGB", (64, 48), (200, 30, 90)).save(b, "JPEG")
    t = decode_jpeg(torch.frombuffer(bytearray(b.getvalue()), dtype=torch.uint8), device="cuda")
    print(f"torchvision {torchvision.__version__}: decode_jpeg(device='cuda') works ({tuple(t.shape)} on {t.device})")
except Exception as e:
    print(f"torchvision decode_jpeg on cuda: {type(e).__name__}: {e}")
PYEOF
  echo "# ldconfig -p | grep -i nvjpeg"
  ldconfig -p 2>/dev/null | grep -i nvjpeg || echo "  (none)"
  echo "# featurefs doctor (head)"
  "$BIN" doctor --ort-lib "$ORT_LIB" 2>&1 | head -60
} >"$OUT/nvjpeg.txt" 2>&1
cat "$OUT/nvjpeg.txt" >&2

# 3b. The binding alone against the real nvJPEG (extractor's TestNVJPEGOnGPU,
# built here with -tags gpu and carried as nvjpeg.test.gz): pixels against
# libjpeg-turbo's, a corrupt and a truncated JPEG in a batch, a throughput
# figure. At most 90 s; its output is $OUT/nvjpeg-test.txt.
if [ -x "$STASH/bin/nvjpeg.test" ] && [ "$REHEARSAL" != 1 ]; then
  say "running the nvJPEG binding's GPU test"
  (cd "$REPO/extractor" && timeout 90 "$STASH/bin/nvjpeg.test" -test.run 'NVJPEGOnGPU' -test.v) >"$OUT/nvjpeg-test.txt" 2>&1
  say "nvJPEG binding's GPU test: rc $? (tail follows)"
  tail -20 "$OUT/nvjpeg-test.txt" >&2
fi

# 4. The decode step and the throughput comparison, cut at the budget.
BUDGET=${GPU38_BUDGET_S:-480}
left=$((BUDGET - ($(date +%s) - T0)))
say "running gpu-check (${GPU38_STEPS:-decode,decode-throughput}) for at most ${left}s"
if [ "$REHEARSAL" = 1 ]; then
  sizes=(GPU_CHECK_ROUNDS="${GPU38_ROUNDS:-1}" GPU_CHECK_ORT_TIME="${GPU38_ORT_TIME:-2s}")
else
  sizes=(GPU_CHECK_ROUNDS="${GPU38_ROUNDS:-3}" GPU_CHECK_IMAGES="${GPU38_IMAGES:-2000}"
    GPU_CHECK_E2E_IMAGES="${GPU38_E2E_IMAGES:-4000}" GPU_CHECK_E2E_UNIQUE="${GPU38_E2E_UNIQUE:-2000}"
    GPU_CHECK_DECODE_IMAGES="${GPU38_DECODE_IMAGES:-1000}" GPU_CHECK_ORT_TIME="${GPU38_ORT_TIME:-2s}")
fi
: >"$OUT/results.jsonl"
# gpu-check's work directories from before this run, never touched below
before=" $(echo /tmp/featurefs-gpu-check.*) "
rc=0
env "${sizes[@]}" GPU_CHECK_STEPS="${GPU38_STEPS:-decode,decode-throughput}" GPU_CHECK_KEEP=1 \
  GPU_CHECK_RESULTS="$OUT/results.jsonl" FEATUREFS_BIN="$BIN" FEATUREFS_ORT_LIB="$ORT_LIB" PYTHONUNBUFFERED=1 \
  timeout -k 20 "$left" bash scripts/gpu-check.sh >"$OUT/gpu-38.md" 2>"$OUT/gpu-check.log" || rc=$?
tail -n 40 "$OUT/gpu-check.log" >&2
case $rc in
0) say "gpu-check passed in $(($(date +%s) - T0))s; the report is $OUT/gpu-38.md" ;;
124 | 137) say "gpu-check was stopped at the budget (${BUDGET}s; GPU38_BUDGET_S): the figures measured so far are in $OUT/results.jsonl" ;;
*) say "gpu-check failed (exit $rc): see $OUT/gpu-check.log" ;;
esac
# the logs and stats of the kept work directory (not the images), small
work=$(sed -n 's/^gpu-check: work directory kept: //p' "$OUT/gpu-check.log" | tail -1)
if [ -z "$work" ]; then # cut before its exit trap said: the one this run made
  for d in /tmp/featurefs-gpu-check.*; do [[ $before == *" $d "* ]] || work=$d; done
fi
if [ -n "$work" ] && [ -d "$work" ] && [[ $before != *" $work "* ]]; then
  (cd "$work" && find . -maxdepth 1 -type f \( -name '*.log' -o -name '*.json' -o -name '*.jsonl' -o -name '*.txt' \) -size -8M -print0 |
    tar --null -czf "$OUT/logs.tar.gz" -T - 2>/dev/null) || true
  [ "$(stat -c %s "$OUT/logs.tar.gz" 2>/dev/null || echo 0)" -le 12000000 ] || rm -f "$OUT/logs.tar.gz"
  umount "$work/mnt" 2>/dev/null || true
  rm -rf "$work"
fi
if [ $rc -ne 0 ] && [ -s "$OUT/results.jsonl" ]; then
  # cut short or failed: the decode section from the figures measured so far
  dev=cuda:0 ddev=cuda gd=gpu n=${GPU38_IMAGES:-2000} e2e=${GPU38_E2E_IMAGES:-4000}
  [ "$REHEARSAL" = 1 ] && dev=cpu ddev=cpu gd=cpu n=24 e2e=40 # gpu-check's rehearsal sizes
  { echo "(gpu-check did not finish: exit $rc; the decode section below is made from results.jsonl)"; echo
    "$PY" scripts/gpu_check.py decode-report --results "$OUT/results.jsonl" --rehearsal "$REHEARSAL" --device "$dev" \
      --decode-device "$ddev" --gpu-decode "$gd" --images "$n" --e2e-images "$e2e"
  } >"$OUT/gpu-38.md" 2>>"$OUT/gpu-check.log" || say "no report from the partial results (see $OUT/gpu-check.log)"
fi
[ -s "$OUT/gpu-38.md" ] && cat "$OUT/gpu-38.md"
say "done in $(($(date +%s) - T0))s"
exit $rc
