#!/usr/bin/env bash
# make gpu-check: featurefs on a GPU host, in one command (docs/GPU.md).
#
# Needs only the built binary (bin/featurefs, or $FEATUREFS_BIN), ONNX
# Runtime with its GPU providers (scripts/install-ort.sh --gpu, or
# $FEATUREFS_ORT_LIB) and this host's python with torch and torchvision on
# CUDA (the first python3 on PATH whose torch sees a GPU, /usr/bin/python3,
# or $FEATUREFS_PY); no network. Where there is no usable GPU it exits 1
# with one line saying why. Otherwise, in one run:
#
#  1. fidelity through a real mount with --device cuda: layer12 and layer18
#     of a seeded ResNet-50 against torchvision's forward on the same GPU
#     with the same TF32 setting, on 220 varied JPEG/PNG images
#     (scripts/gen_dataset.py), --precision fp32 and tf32: mean cosine
#     >= 0.999 and every image >= 0.995; fp32 must hold;
#  2. throughput, $ROUNDS interleaved rounds, medians: featurefs's extractor
#     (featurefs bench) on $IMAGES ImageNet-like JPEGs (300-800 px sides) vs
#     PyTorch on the same GPU (torchvision ResNet-50 truncated at the same
#     layer, a DataLoader with one PIL worker per core, pin_memory, same
#     precision) vs bare ONNX Runtime CUDA on random input at featurefs's
#     batch size (the GPU ceiling) vs featurefs's decode+preprocess alone on
#     all cores (the CPU ceiling); GPU utilization and memory from NVML;
#  3. end to end, what a user would compare, $ROUNDS interleaved rounds on
#     $E2E_IMAGES more ImageNet-like JPEGs (so that start-up does not
#     dominate): epoch 1 of an unmodified DataLoader (DatasetFolder, np.load,
#     batch 64, one worker per core, pin_memory, batches moved to the GPU)
#     through a fresh --device cuda mount with the defaults (prefetch on), vs
#     PyTorch end to end (ImageFolder + PIL + the truncated torchvision model
#     on the same GPU, one worker per core, pin_memory, featurefs's batch
#     size); images/s of epoch 1 and the wall time from the mount's (or
#     python's) start through the scan to the epoch's end, and the mount's
#     peak RSS;
#  4. decode (issue 38): JPEG decode on the GPU, its fidelity measured: on
#     $DECODE_IMAGES ImageNet-like JPEGs of every kind (scripts/jpeg_kinds.py:
#     4:2:0, 4:2:2, 4:4:4, gray, restart markers, and progressive and CMYK
#     files the GPU decoder should refuse, so that its CPU fallback runs)
#     plus scripts/gen_dataset.py's images, features of the seeded
#     ResNet-50 at layer12, layer18 and layer19 (the output) from
#     `featurefs extract --device cuda --decode gpu` against torchvision's
#     PIL pipeline on the same GPU (fp32): mean and worst cosine, max
#     relative L2, by JPEG kind; torchvision.io.decode_jpeg on the GPU
#     (nvJPEG) against PIL's convert("RGB"), pixel by pixel, by kind; the
#     bar for --decode auto is mean cosine >= 0.9999 and max relative L2 <=
#     1e-2 at every layer (reported, not enforced);
#  5. decode-throughput (issue 38), $ROUNDS interleaved rounds at layer18:
#     featurefs bench --decode gpu vs --decode cpu vs the CPU decode ceiling
#     vs bare ONNX Runtime; epoch 1 of the unmodified DataLoader through a
#     fresh --decode gpu mount and a --decode cpu mount vs PyTorch end to
#     end, with the mount's CPU-seconds per image over the epoch
#     (/proc/PID/stat); the issue's targets with verdicts;
#
# and prints one markdown section for docs/bench/gpu.md on stdout (the
# Makefile writes it there), with the host (GPU, driver, cores). It exits 1
# when a step fails or fp32 fidelity does not hold; the throughput targets
# are reported, not enforced.
#
#   scripts/gpu-check.sh
# Env: GPU_CHECK_ROUNDS (3), GPU_CHECK_IMAGES (4000), GPU_CHECK_E2E_IMAGES
# (20000), GPU_CHECK_KEEP=1 keeps the work directory, GPU_CHECK_RESULTS=FILE
# appends each result line to FILE as it comes (the raw figures survive a
# run cut short), GPU_CHECK_STEPS (fidelity,throughput,e2e,decode,
# decode-throughput: the steps to run; without fidelity the runs use fp32,
# without throughput PyTorch's batch is 256), GPU_CHECK_DECODE_IMAGES
# (1000: the decode step's JPEGs of jpeg_kinds' kinds, besides 100 of
# gen_dataset's), GPU_CHECK_ORT_TIME (5s: each bare ONNX Runtime run of
# decode-throughput), GPU_CHECK_E2E_UNIQUE (E2E_IMAGES: generate only this many
# distinct JPEGs and fill the end-to-end set with copies of them, for a host
# lent briefly), FEATUREFS_PY, FEATUREFS_BIN, FEATUREFS_ORT_LIB.
# GPU_CHECK_REHEARSAL=1 runs every step on the CPU instead (fp32 only, 24
# images, one round, --decode cpu where a GPU host runs --decode gpu,
# torchvision's decode_jpeg on the CPU; the report says so): a test of this
# script on a machine without a GPU, not a measurement.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
REHEARSAL=${GPU_CHECK_REHEARSAL:-0}
if [ "$REHEARSAL" = 1 ]; then
  ROUNDS=${GPU_CHECK_ROUNDS:-1} IMAGES=${GPU_CHECK_IMAGES:-24} E2E_IMAGES=${GPU_CHECK_E2E_IMAGES:-40} FIDELITY=(--classes 3 --train 3 --val 1)
  PRECS=(fp32) TORCH_DEV=cpu
  # --decode gpu needs a GPU device: a rehearsal runs --decode cpu in its place
  DECODE_IMAGES=${GPU_CHECK_DECODE_IMAGES:-14} DECODE_GEN=(--classes 2 --train 4 --val 0) GPU_DECODE=cpu
  echo "gpu-check: REHEARSAL (GPU_CHECK_REHEARSAL=1): every step on the CPU, --decode cpu in place of --decode gpu, tiny sets, one round: NOT GPU FIGURES" >&2
else
  ROUNDS=${GPU_CHECK_ROUNDS:-3} IMAGES=${GPU_CHECK_IMAGES:-4000} E2E_IMAGES=${GPU_CHECK_E2E_IMAGES:-20000} FIDELITY=(--classes 10 --train 20 --val 2)
  PRECS=(fp32 tf32) TORCH_DEV=cuda
  DECODE_IMAGES=${GPU_CHECK_DECODE_IMAGES:-1000} DECODE_GEN=(--classes 10 --train 10 --val 0) GPU_DECODE=gpu
fi
CHECK=$REPO/scripts/gpu_check.py

fail() { echo "gpu-check: $*" >&2; exit 1; }
log() { echo "gpu-check: $*" >&2; }

# 0. Is there a GPU featurefs and PyTorch can use?
[ -x "$BIN" ] || fail "no featurefs binary at $BIN: run 'make build' (or set FEATUREFS_BIN)"
[ -s "$FEATUREFS_ORT_LIB" ] || fail "no ONNX Runtime at $FEATUREFS_ORT_LIB: run scripts/install-ort.sh --gpu (or set FEATUREFS_ORT_LIB)"

# featurefs finds the CUDA libraries of the pythons on PATH itself; a
# FEATUREFS_PY elsewhere has its nvidia/*/lib folders named for it.
if [ -n "${FEATUREFS_PY:-}" ]; then
  case ":$PATH:" in
  *":$(dirname "$FEATUREFS_PY"):"*) ;;
  *)
    extra=$("$FEATUREFS_PY" -c 'import glob, site; print(":".join(d for s in site.getsitepackages() for d in sorted(glob.glob(s + "/nvidia/*/lib"))))') ||
      fail "FEATUREFS_PY=$FEATUREFS_PY does not run"
    [ -n "$extra" ] && export FEATUREFS_CUDA_LIB_DIR=${FEATUREFS_CUDA_LIB_DIR:+$FEATUREFS_CUDA_LIB_DIR:}$extra
    ;;
  esac
fi

auto=$("$BIN" doctor --ort-lib "$FEATUREFS_ORT_LIB" | sed -n '/^--device auto/{n;p;}' | sed 's/^ *//')
[ "$REHEARSAL" = 1 ] && auto="runs on cpu: rehearsal"
case $auto in
"runs on cpu: rehearsal") ;;
"runs on cuda:"*) ;;
*)
  why=${auto#runs on the CPU: }; why=${why#GPU unavailable: }; why=${why%; running on the CPU}
  fail "no usable GPU: ${why:-featurefs doctor failed} (featurefs doctor says more)"
  ;;
esac
pick_python() {
  local p
  if [ -n "${FEATUREFS_PY:-}" ]; then echo "$FEATUREFS_PY"; return; fi
  for p in $(type -ap python3) /usr/bin/python3; do
    "$p" -c 'import sys, torch, torchvision; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1 && { echo "$p"; return; }
  done
  for p in $(type -ap python3) /usr/bin/python3; do
    "$p" -c 'import torch, torchvision' >/dev/null 2>&1 && { echo "$p"; return; }
  done
  echo ""
}
PY=$(pick_python)
[ -n "$PY" ] || fail "no python3 with torch and torchvision (on PATH or /usr/bin/python3; set FEATUREFS_PY)"

# One GPU, the first auto uses (doctor says "runs on cuda:0,1: ..." on a
# host with several): the comparison is against PyTorch on one GPU.
DEVICE=$(sed -n 's/^runs on \(cuda:[0-9]*\|cpu\)[,:].*/\1/p' <<<"$auto")
TORCH=$("$PY" "$CHECK" info --device "$TORCH_DEV" 2>&1) || fail "$TORCH"
log "featurefs runs on $DEVICE; PyTorch: $TORCH"

WORK=$(mktemp -d /tmp/featurefs-gpu-check.XXXXXX)
MNT=$WORK/mnt
cleanup() {
  local rc=$?
  unmount "$MNT" >/dev/null 2>&1 || true
  if [ "${GPU_CHECK_KEEP:-0}" = 1 ] || [ $rc -ne 0 ]; then log "work directory kept: $WORK"; else rm -rf "$WORK"; fi
  exit $rc
}
trap cleanup EXIT
mkdir -p "$MNT"
RES=$WORK/results.jsonl
: >"$RES"
record() { # record KIND ROUND JSON-LINES...: one line per JSON object, tagged
  local kind=$1 round=$2 line
  shift 2
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    line="{\"kind\": \"$kind\", \"round\": $round, \"r\": $line}"
    echo "$line" >>"$RES"
    [ -z "${GPU_CHECK_RESULTS:-}" ] || echo "$line" >>"$GPU_CHECK_RESULTS"
  done <<<"$*"
}

log "exporting ResNet-50 (seeded random weights) with $PY"
MODEL=$WORK/resnet50.onnx
"$PY" "$CHECK" export --out "$MODEL" >/dev/null
DEFAULT_STEPS=fidelity,throughput,e2e,decode,decode-throughput
STEPS=",${GPU_CHECK_STEPS:-$DEFAULT_STEPS},"
has() { [[ $STEPS == *",$1,"* ]]; }
for s in ${STEPS//,/ }; do
  [[ ",$DEFAULT_STEPS," == *",$s,"* ]] || fail "GPU_CHECK_STEPS: unknown step $s (want some of $DEFAULT_STEPS)"
done
UNIQUE=${GPU_CHECK_E2E_UNIQUE:-$E2E_IMAGES}
if has throughput || has e2e || has decode-throughput; then
log "generating $E2E_IMAGES JPEGs (the first $IMAGES of them for the throughput steps)"
"$PY" "$CHECK" images --out "$WORK/e2e" --n "$UNIQUE" >/dev/null
# copies (their own files, not links: no two keys share an object) up to E2E_IMAGES
[ "$UNIQUE" -ge "$E2E_IMAGES" ] || "$PY" -c 'import glob, os, shutil, sys
root, want = sys.argv[1], int(sys.argv[2])
src = sorted(glob.glob(os.path.join(root, "train", "*", "*.jpg")))
for i in range(want - len(src)):
    f = src[i % len(src)]
    shutil.copyfile(f, f"{f[:-4]}-copy{i // len(src) + 1}.jpg")' "$WORK/e2e" "$E2E_IMAGES"
# the throughput step's set: hard links to the first IMAGES of them
(cd "$WORK/e2e" && find train -name '*.jpg' | sort | awk -v n="$IMAGES" 'NR <= n' | while read -r f; do
  mkdir -p "$WORK/imagenet/$(dirname "$f")" && ln "$f" "$WORK/imagenet/$f"; done)
fi
if has fidelity; then
  log "generating the fidelity set"
  "$PY" "$REPO/scripts/gen_dataset.py" --out "$WORK/fidelity" "${FIDELITY[@]}" \
    --min-side 40 --max-side 700 --seed 7 >/dev/null
  rm -f "$WORK/fidelity/manifest.json"
fi
if has decode; then
  log "generating the decode set: $DECODE_IMAGES JPEGs of every kind (scripts/jpeg_kinds.py) and gen_dataset.py's"
  out=$("$PY" "$CHECK" jpegs --out "$WORK/decode" --n "$DECODE_IMAGES") || fail "generating the decode set failed"
  log "decode set: $out"
  "$PY" "$REPO/scripts/gen_dataset.py" --out "$WORK/decode/gen" "${DECODE_GEN[@]}" \
    --min-side 40 --max-side 700 --seed 11 >/dev/null 2>&1 || fail "gen_dataset.py for the decode set failed"
  rm -f "$WORK/decode/gen/manifest.json"
fi

# 1. Fidelity through a --device cuda mount, fp32 and tf32.
has fidelity || PRECS=()
for prec in "${PRECS[@]}"; do
  log "fidelity, --precision $prec"
  featurefs_mount --device "$DEVICE" --precision "$prec" --model "resnet50=$MODEL" --cache-dir "$WORK/cache-fid-$prec" \
    --log-file "$WORK/mount-fid-$prec.log" "$WORK/fidelity" "$MNT" >/dev/null
  wait_mounted "$MNT"
  tf32=0; [ "$prec" = tf32 ] && tf32=1
  out=$("$PY" "$CHECK" fidelity --mount "$MNT" --images "$WORK/fidelity" --tf32 "$tf32" --device "$TORCH_DEV") ||
    { unmount "$MNT"; fail "fidelity check ($prec) failed; the mount log is $WORK/mount-fid-$prec.log"; }
  unmount "$MNT" || fail "could not unmount $MNT"
  record "fidelity-$prec" 0 "$out"
done
holds() { "$PY" -c 'import json,sys
r=[json.loads(l) for l in open(sys.argv[1]) if json.loads(l)["kind"]==sys.argv[2]]
sys.exit(0 if r and all(v["holds"] for v in r[0]["r"]["layers"].values()) else 1)' "$RES" "$1"; }
PREC=fp32
holds fidelity-tf32 && PREC=tf32
TF32=0; [ "$PREC" = tf32 ] && TF32=1
case $PREC:$REHEARSAL in
tf32:*) log "benchmarks at --precision tf32: TF32 holds the fidelity bar" ;;
*:1) log "benchmarks at --precision fp32 (a rehearsal measures no TF32)" ;;
*) log "benchmarks at --precision fp32: TF32 misses the fidelity bar" ;;
esac

# 2. Throughput, interleaved rounds.
declare -A BATCH=()
ff() {
  local out
  out=$("$BIN" bench --device "$DEVICE" --precision "$PREC" --model "$MODEL" --modes extract --layers layer12,layer18 \
    "$WORK/imagenet" 2>>"$WORK/bench.log") || fail "featurefs bench (extract) failed: $(tail -3 "$WORK/bench.log")"
  record featurefs "$1" "$out"
  while read -r l b; do BATCH[$l]=$b; done < <("$PY" -c 'import json,sys
for l in sys.stdin: r=json.loads(l); print(r["layer"], r["batch"])' <<<"$out")
}
pt() {
  local l out
  for l in layer12 layer18; do
    out=$("$PY" "$CHECK" torch --images "$WORK/imagenet" --layer "$l" --batch "${BATCH[$l]:-64}" --tf32 "$TF32" \
      --device "$TORCH_DEV" 2>>"$WORK/torch.log") ||
      fail "PyTorch benchmark ($l) failed: $(tail -3 "$WORK/torch.log")"
    record pytorch "$1" "$out"
  done
}
bare() {
  local l out
  for l in layer12 layer18; do
    out=$("$BIN" bench --device "$DEVICE" --precision "$PREC" --model "$MODEL" --modes ort --layers "$l" \
      --batch-size "${BATCH[$l]:-64}" "$WORK/imagenet" 2>>"$WORK/bench.log") || fail "featurefs bench (ort) failed: $(tail -3 "$WORK/bench.log")"
    record ort "$1" "$out"
  done
}
dec() {
  local out
  out=$("$BIN" bench --device cpu --model "$MODEL" --modes decode "$WORK/imagenet" 2>>"$WORK/bench.log") ||
    fail "featurefs bench (decode) failed: $(tail -3 "$WORK/bench.log")"
  record decode "$1" "$out"
}
if has throughput; then
  ff -1 # batch sizes for PyTorch and the bare runs; round -1 is not counted
else
  BATCH=([layer12]=256 [layer18]=256)
fi

# 3. (run before the throughput rounds) End to end, what a user compares:
# epoch 1 of an unmodified DataLoader through a fresh --device cuda mount
# with the defaults, vs PyTorch from JPEGs, on E2E_IMAGES; wall times
# include the mount's (python's) start and the DataLoader's scan.
now() { date +%s.%N; }
e2e_mount() {
  local l=$1 r=$2 out t0 pid hwm cpu
  t0=$(now)
  featurefs_mount --device "$DEVICE" --precision "$PREC" --model "resnet50=$MODEL" --cache-dir "$WORK/cache-e2e" \
    --log-file "$WORK/mount-e2e-$l-$r.log" "$WORK/e2e" "$MNT" >/dev/null 2>&1 ||
    fail "mount for the end-to-end run ($l) failed; the mount log is $WORK/mount-e2e-$l-$r.log"
  wait_mounted "$MNT"
  out=$("$PY" "$CHECK" e2e-mount --root "$MNT/features/resnet50/$l/train" --device "$TORCH_DEV" --t0 "$t0" 2>>"$WORK/e2e.log") ||
    { unmount "$MNT"; fail "DataLoader over the mount ($l) failed: $(tail -3 "$WORK/e2e.log"); the mount log is $WORK/mount-e2e-$l-$r.log"; }
  pid=${MOUNT_PIDS[$MNT]:-}
  hwm=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$pid/status" 2>/dev/null || true)
  cpu=$(awk -v t="$(getconf CLK_TCK)" '{sub(/^.*\) /, ""); print ($12 + $13) / t}' "/proc/$pid/stat" 2>/dev/null || echo 0)
  cp "$MNT/.featurefs/stats" "$WORK/stats-e2e-$l-$r.txt" 2>/dev/null || true
  unmount "$MNT" || fail "could not unmount $MNT"
  rm -rf "$WORK/cache-e2e"
  record "e2e-mount" "$r" "$("$PY" -c 'import json,sys; r=json.loads(sys.argv[1]); r["layer"]=sys.argv[2]; r["rss_peak_bytes"]=int(sys.argv[3] or 0)*1024; r["mount_cpu_seconds"]=float(sys.argv[4] or 0); print(json.dumps(r))' "$out" "$l" "$hwm" "$cpu")"
}
e2e_torch() {
  local l=$1 r=$2 out t0
  t0=$(now)
  out=$("$PY" "$CHECK" e2e-torch --images "$WORK/e2e" --layer "$l" --batch "${BATCH[$l]:-64}" --tf32 "$TF32" \
    --device "$TORCH_DEV" --t0 "$t0" 2>>"$WORK/e2e.log") || fail "PyTorch end to end ($l) failed: $(tail -3 "$WORK/e2e.log")"
  record "e2e-torch" "$r" "$out"
}
e2e_steps=("e2e_mount layer12" "e2e_torch layer12" "e2e_mount layer18" "e2e_torch layer18")
has e2e || e2e_steps=()
for ((r = 0; r < ROUNDS && ${#e2e_steps[@]} > 0; r++)); do
  rotated "$r" "${e2e_steps[@]}"
  for s in "${ROTATED[@]}"; do
    log "end to end, round $((r + 1))/$ROUNDS: $s"
    $s "$r"
  done
done

steps=(ff pt bare dec)
has throughput || steps=()
for ((r = 0; r < ROUNDS && ${#steps[@]} > 0; r++)); do
  rotated "$r" "${steps[@]}"
  for s in "${ROTATED[@]}"; do
    log "round $((r + 1))/$ROUNDS: $s"
    $s "$r"
  done
done

# 4. The decode step (issue 38): features with --decode gpu against
# torchvision's PIL pipeline, and nvJPEG's pixels against PIL's. fp32 on
# both sides (TF32 would blur what decoding changes).
cpu_s() { # cpu_s PID: the process's utime+stime in seconds
  awk -v t="$(getconf CLK_TCK)" '{sub(/^.*\) /, ""); print ($12 + $13) / t}' "/proc/$1/stat"
}
DECODE_FAILED=()
if has decode; then
  for l in layer12 layer18 layer19; do
    log "decode fidelity: featurefs extract --device $DEVICE --decode $GPU_DECODE --layer $l"
    rc=0
    "$BIN" extract --device "$DEVICE" --decode "$GPU_DECODE" --model "$MODEL" --layer "$l" --log-level info \
      --progress-interval 1h "$WORK/decode" -o "$WORK/decode-out/$l" >/dev/null 2>"$WORK/extract-decode-$l.log" || rc=$?
    case $rc in
    0) ;;
    1) log "featurefs extract --decode $GPU_DECODE ($l) failed some images (counted as missing): $(tail -3 "$WORK/extract-decode-$l.log")" ;;
    *) # the pixel comparison and the other layers still run; gpu-check fails after its report
      log "FAILED: featurefs extract --decode $GPU_DECODE ($l), exit $rc: $(tail -3 "$WORK/extract-decode-$l.log")"
      DECODE_FAILED+=("$l (exit $rc)") ;;
    esac
  done
  log "decode fidelity: torchvision's PIL pipeline and decode_jpeg on $TORCH_DEV"
  out=$("$PY" "$CHECK" decode-fidelity --images "$WORK/decode" --features "$WORK/decode-out" --device "$TORCH_DEV" \
    --decode-device "$TORCH_DEV" --decode "$GPU_DECODE" --logs "$WORK"/extract-decode-*.log 2>>"$WORK/decode.log") ||
    fail "decode fidelity check failed: $(tail -3 "$WORK/decode.log")"
  record decode-fidelity 0 "$out"
  rm -rf "$WORK/decode-out" # layer12's features are 800 KB an image
fi

# 5. Decode throughput at layer18 (issue 38), interleaved rounds: the
# extractor with --decode gpu and cpu, the two ceilings, epoch 1 through a
# --decode gpu and a --decode cpu mount vs PyTorch, the mount's CPU-seconds
# per image over the epoch.
dt_bench() { # dt_bench NAME DECODE ROUND
  local out
  out=$("$BIN" bench --device "$DEVICE" --precision "$PREC" --decode "$2" --model "$MODEL" --modes extract --layers layer18 \
    "$WORK/imagenet" 2>>"$WORK/bench-decode.log") || fail "featurefs bench --decode $2 failed: $(tail -3 "$WORK/bench-decode.log")"
  record "dt-bench-$1" "$3" "$out"
}
dt_bench_gpu() { dt_bench gpu "$GPU_DECODE" "$1"; }
dt_bench_cpu() { dt_bench cpu cpu "$1"; }
dt_ort() {
  local out b=()
  [ -z "${BATCH[layer18]:-}" ] || b=(--batch-size "${BATCH[layer18]}")
  out=$("$BIN" bench --device "$DEVICE" --precision "$PREC" --model "$MODEL" --modes ort --layers layer18 "${b[@]}" \
    --ort-time "${GPU_CHECK_ORT_TIME:-5s}" \
    "$WORK/imagenet" 2>>"$WORK/bench-decode.log") || fail "featurefs bench (ort) failed: $(tail -3 "$WORK/bench-decode.log")"
  record dt-ort "$1" "$out"
}
dt_decode() {
  local out
  out=$("$BIN" bench --device cpu --model "$MODEL" --modes decode "$WORK/imagenet" 2>>"$WORK/bench-decode.log") ||
    fail "featurefs bench (decode) failed: $(tail -3 "$WORK/bench-decode.log")"
  record dt-decode "$1" "$out"
}
dt_mount() { # dt_mount NAME DECODE ROUND
  local name=$1 d=$2 r=$3 out t0 pid c0 c1 log=$WORK/mount-dt-$1-$3.log
  t0=$(now)
  featurefs_mount --device "$DEVICE" --precision "$PREC" --decode "$d" --model "resnet50=$MODEL" --cache-dir "$WORK/cache-dt" \
    --log-file "$log" "$WORK/e2e" "$MNT" >/dev/null 2>&1 || fail "mount --decode $d failed; the mount log is $log"
  wait_mounted "$MNT"
  pid=${MOUNT_PIDS[$MNT]:-}
  [ -n "$pid" ] && c0=$(cpu_s "$pid") || { unmount "$MNT"; fail "no pid for the --decode $d mount: no CPU figure"; }
  out=$("$PY" "$CHECK" e2e-mount --root "$MNT/features/resnet50/layer18/train" --device "$TORCH_DEV" --t0 "$t0" 2>>"$WORK/e2e.log") ||
    { unmount "$MNT"; fail "DataLoader over the --decode $d mount failed: $(tail -3 "$WORK/e2e.log"); the mount log is $log"; }
  c1=$(cpu_s "$pid") || { unmount "$MNT"; fail "the --decode $d mount (pid $pid) is gone: no CPU figure"; }
  cp "$MNT/.featurefs/stats" "$WORK/stats-dt-$name-$r.json" 2>/dev/null || true
  unmount "$MNT" || fail "could not unmount $MNT"
  rm -rf "$WORK/cache-dt"
  record "dt-mount-$name" "$r" "$("$PY" - "$out" "$d" "$c0" "$c1" "$WORK/stats-dt-$name-$r.json" "$log" <<'PYEOF'
import json, os, sys
sys.path.insert(0, os.environ["GPU_CHECK_SCRIPTS"])
from gpu_check import _decode_counts
r = json.loads(sys.argv[1])
r.update(layer="layer18", decode=sys.argv[2], epoch_cpu_seconds=float(sys.argv[4]) - float(sys.argv[3]),
         mount_cpu_seconds=float(sys.argv[4]), decode_counts=_decode_counts(sys.argv[5:7]))
print(json.dumps(r))
PYEOF
)"
}
dt_mount_gpu() { dt_mount gpu "$GPU_DECODE" "$1"; }
dt_mount_cpu() { dt_mount cpu cpu "$1"; }
dt_torch() {
  local out t0
  t0=$(now)
  out=$("$PY" "$CHECK" e2e-torch --images "$WORK/e2e" --layer layer18 --batch "${BATCH[layer18]:-256}" --tf32 "$TF32" \
    --device "$TORCH_DEV" --t0 "$t0" 2>>"$WORK/e2e.log") || fail "PyTorch end to end (layer18) failed: $(tail -3 "$WORK/e2e.log")"
  record dt-torch "$1" "$out"
}
export GPU_CHECK_SCRIPTS=$REPO/scripts
steps=(dt_bench_gpu dt_bench_cpu dt_ort dt_decode dt_mount_gpu dt_mount_cpu dt_torch)
has decode-throughput || steps=()
for ((r = 0; r < ROUNDS && ${#steps[@]} > 0; r++)); do
  rotated "$r" "${steps[@]}"
  for s in "${ROTATED[@]}"; do
    log "decode throughput, round $((r + 1))/$ROUNDS: $s"
    $s "$r"
  done
done

# The report.
"$BIN" doctor --json --ort-lib "$FEATUREFS_ORT_LIB" >"$WORK/doctor.json"
HOST_GPU=$("$PY" - "$WORK/doctor.json" "$DEVICE" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
if sys.argv[2] == "cpu":
    print(f"NO GPU: A REHEARSAL ON THE CPU (GPU_CHECK_REHEARSAL=1), NOT GPU FIGURES; ONNX Runtime {d['ort']['version']}")
    sys.exit(0)
i = int(sys.argv[2].split(":")[1])
g = [g for g in d["gpus"] if g["index"] == i][0]
print(f"{g['name']} ({g['total_bytes'] / 2**30:.0f} GiB, compute capability {g['capability']}), "
      f"driver {d['driver']}, CUDA {d['cuda']}; ONNX Runtime {d['ort']['version']}")
PYEOF
)
CPU=$(sed -n 's/^model name[^:]*: *//p' /proc/cpuinfo | head -1)
grep -h 'batch size from GPU memory' "$WORK/bench.log" "$WORK"/mount-*.log 2>/dev/null | head -4 >"$WORK/batch.txt" || true
fid_ok=1
"$PY" - "$RES" "$TORCH" "$HOST_GPU" "$(nproc)" "$CPU" "$PREC" "$ROUNDS" "$IMAGES" "$WORK/batch.txt" "$E2E_IMAGES" <<'PYEOF' || fid_ok=0
import json, statistics, sys
res = [json.loads(l) for l in open(sys.argv[1])]
res = [x for x in res if x["round"] >= 0]
torch, host_gpu, ncpu, cpu, prec, rounds, nimg = json.loads(sys.argv[2]), *sys.argv[3:9]
batch_lines = open(sys.argv[9]).read().split("\n")
e2e_n = sys.argv[10]

def of(kind, layer=None):
    return [x["r"] for x in res if x["kind"] == kind and (layer is None or x["r"].get("layer") == layer)]

def med(v):
    return statistics.median(v) if v else float("nan")

def num(x):
    """x with three significant digits (no exponent), "n/a" for NaN."""
    if x != x:
        return "n/a"
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def rng(v):
    return f"{num(min(v))}-{num(max(v))}" if v else "n/a"

print("## GPU extraction (ResNet-50 layer12 and layer18)")
print()
print(f"`make gpu-check` (scripts/gpu-check.sh) on {host_gpu}; {ncpu} CPU cores ({cpu}); PyTorch {torch['torch']} "
      f"(CUDA {torch['cuda']}, cuDNN {torch['cudnn']}), torchvision {torch['torchvision']}. ResNet-50 with seeded random weights.")
print()
fid_ok = True
if not of("fidelity-fp32") and not of("fidelity-tf32"):
    print("### Fidelity through a `--device cuda` mount: not run (GPU_CHECK_STEPS)")
    print()
else:
    print("### Fidelity through a `--device cuda` mount")
    print()
    nfid = max([v["images"] for r in of("fidelity-fp32") for v in r["layers"].values()] or [0])
    print("Each image's `.npy` read through the mount against torchvision's forward on the same GPU with the same TF32 "
          f"setting ({nfid} JPEG and PNG images of `scripts/gen_dataset.py`, 40-700 px, baseline/progressive/grayscale JPEG, "
          "RGB/RGBA/paletted/grayscale PNG). Bar: mean cosine >= 0.999 and every image >= 0.995.")
    print()
    print("| --precision | layer | images | mean cosine | worst cosine (image) | bar |")
    print("|---|---|---|---|---|---|")
    fid_ok = True
    for p in ("fp32", "tf32"):
        for r in of("fidelity-" + p):
            for layer, v in r["layers"].items():
                ok = v["holds"]
                if p == "fp32":
                    fid_ok &= ok
                print(f"| {p} | {layer} | {v['images']} | {v['mean']:.6f} | {v['min']:.6f} ({v['worst']}) | {'holds' if ok else 'MISSED'} |")
    print()
dec = [r["images_per_s"] for r in of("decode")]
if not of("featurefs"):
    # GPU_CHECK_STEPS without throughput: no section of n/a figures and false verdicts
    print("### Throughput: not run (GPU_CHECK_STEPS)")
    print()
else:
    print(f"### Throughput ({nimg} ImageNet-like JPEGs, 300-800 px; {rounds} interleaved round(s), medians (min-max); --precision {prec})")
    print()
    print("featurefs: `featurefs bench --modes extract` (every image through the extractor at once, after a warm-up image and a warm-up batch). "
          f"PyTorch: the model truncated at the same layer, a DataLoader with {ncpu} PIL workers, pin_memory, the same batch "
          "size and TF32 setting, cudnn.benchmark, mean of epochs 2-3 (workers kept). GPU ceiling: `featurefs bench --modes ort` "
          "(bare ONNX Runtime CUDA on random input, same batch size and batches in flight). CPU ceiling: `featurefs bench --modes decode` "
          f"(decode and preprocess on {ncpu} cores, no model).")
    print()
    print("| layer | batch | featurefs images/s | PyTorch images/s | **featurefs / PyTorch** (target >= 1.5x) | GPU ceiling images/s | CPU ceiling images/s | **featurefs / lower ceiling** (target >= 80%) | featurefs GPU util | featurefs GPU memory | PyTorch GPU memory |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    verdicts = []
    for layer in ("layer12", "layer18"):
        f = of("featurefs", layer)
        p = of("pytorch", layer)
        o = of("ort", layer)
        fv, pv, ov = [r["images_per_s"] for r in f], [r["images_per_s"] for r in p], [r["images_per_s"] for r in o]
        ratio = med(fv) / med(pv)
        ceil = min(med(ov), med(dec))
        share = med(fv) / ceil
        util = med([r["gpu_util_percent"] for r in f if "gpu_util_percent" in r])
        mem = max([r.get("gpu_mem_max_bytes", 0) for r in f] or [0]) / 2**30
        pmem = max([r.get("gpu_mem_max_bytes", 0) for r in p] or [0]) / 2**30
        gib = lambda b: f"{b:.1f} GiB" if b > 0 else "n/a"
        print(f"| {layer} | {f[0]['batch'] if f else '?'} | {num(med(fv))} ({rng(fv)}) | {num(med(pv))} ({rng(pv)}) | **{ratio:.2f}x** "
              f"({'met' if ratio >= 1.5 else 'MISSED'}) | {num(med(ov))} ({rng(ov)}) | {num(med(dec))} ({rng(dec)}) | **{100 * share:.0f}%** "
              f"({'met' if share >= 0.8 else 'MISSED'}) | {num(util)}{'%' if util == util else ''} | {gib(mem)} | {gib(pmem)} |")
    print()
if not of("e2e-mount"):
    print("### End to end: not run (GPU_CHECK_STEPS)")
    print()
else:
    print(f"### End to end: an unmodified DataLoader through a `--device cuda` mount vs PyTorch ({e2e_n} ImageNet-like JPEGs; {rounds} interleaved round(s), medians (min-max))")
    print()
    print(f"What a user compares. featurefs: a fresh mount with the defaults (`--prefetch tree`, a fresh cache) of the JPEGs, "
          f"`DatasetFolder(MOUNT/features/resnet50/LAYER/train, loader=np.load)`, a shuffling DataLoader (batch 64, {ncpu} workers, "
          "pin_memory), each batch moved to the GPU; epoch 1 computes every feature. PyTorch: `ImageFolder` + PIL + torchvision's "
          f"transforms, a shuffling DataLoader ({ncpu} workers, pin_memory, featurefs's batch size), the model truncated at the "
          "layer on the same GPU (cudnn.benchmark, the same TF32 setting), the features left on the GPU. Epoch 1 images/s counts "
          "from the first batch asked for to the last one's end; wall time counts from the mount command's (python's) start, "
          "through model loading and the DataLoader's scan, to the epoch's end. Mount CPU: the mount process's utime+stime "
          "over its whole life (start-up included) per image. Ceiling: the lower of the GPU and CPU-decode "
          "ceilings above. RSS: the mount process's peak (VmHWM; it counts the CUDA libraries' and the cache's mapped files).")
    print()
    print("| layer | featurefs epoch 1 images/s | PyTorch epoch 1 images/s | **featurefs / PyTorch** (target >= 1.5x) | featurefs wall s (scan s) | PyTorch wall s (scan s) | wall: PyTorch / featurefs | **featurefs / lower ceiling** (target >= 80%) | mount CPU ms/image | mount peak RSS |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for layer in ("layer12", "layer18"):
        m = [r for r in of("e2e-mount") if r.get("layer") == layer]
        t = of("e2e-torch", layer)
        mv, tv = [r["images_per_s"] for r in m], [r["images_per_s"] for r in t]
        mw, tw = [r["wall_seconds"] for r in m], [r["wall_seconds"] for r in t]
        ms, tsc = [r["scan_seconds"] for r in m], [r["scan_seconds"] for r in t]
        cpu = [1000 * r["mount_cpu_seconds"] / r["images"] for r in m if r.get("mount_cpu_seconds")]
        ratio = med(mv) / med(tv) if tv else float("nan")
        o = [r["images_per_s"] for r in of("ort", layer)]
        ceil = min(med(o), med(dec)) if o and dec else float("nan")
        share = med(mv) / ceil
        rss = max([r.get("rss_peak_bytes", 0) for r in m] or [0])
        verdict = lambda ok, x: "no verdict" if x != x else (f"no verdict from {len(mv)} round(s)" if len(mv) < 3 else ("met" if ok else "MISSED"))
        print(f"| {layer} | {num(med(mv))} ({rng(mv)}) | {num(med(tv))} ({rng(tv)}) | **{ratio:.2f}x** ({verdict(ratio >= 1.5, ratio)}) "
              f"| {num(med(mw))} ({num(med(ms))}) | {num(med(tw))} ({num(med(tsc))}) | {med(tw) / med(mw):.2f}x "
              f"| **{'n/a' if share != share else f'{100 * share:.0f}%'}** ({verdict(share >= 0.8, share)}) | {num(med(cpu))} ({rng(cpu)}) | {f'{rss / 2**20:.0f} MiB' if rss else 'n/a'} |")
    print()
if any(l.strip() for l in batch_lines):
    print()
    print("Batch sizes chosen from GPU memory (estimated from the graph vs measured on the GPU), from the logs:")
    print()
    for l in batch_lines:
        if l.strip():
            print("    " + l.strip()[:400])
print()
print(f"fp32 fidelity: {'holds' if fid_ok else 'MISSED'}." if of("fidelity-fp32") else "fp32 fidelity: not checked in this run (GPU_CHECK_STEPS).")
sys.exit(0 if fid_ok else 3)
PYEOF
[ "$fid_ok" = 1 ] || fail "fp32 fidelity does not hold, or the report failed (see above)"
if has decode || has decode-throughput; then
  echo
  "$PY" "$CHECK" decode-report --results "$RES" --rehearsal "$REHEARSAL" --device "$DEVICE" --decode-device "$TORCH_DEV" \
    --gpu-decode "$GPU_DECODE" --images "$IMAGES" --e2e-images "$E2E_IMAGES" ||
    fail "the decode report failed, or a rehearsal's CPU decode missed the bar (see above)"
fi
[ ${#DECODE_FAILED[@]} -eq 0 ] || fail "featurefs extract --decode $GPU_DECODE failed at ${DECODE_FAILED[*]} (its features are counted as missing above; logs: $WORK/extract-decode-*.log)"
if [ "$STEPS" != ",$DEFAULT_STEPS," ] || [ "$UNIQUE" -lt "$E2E_IMAGES" ]; then
  echo
  echo "This run: GPU_CHECK_STEPS=${GPU_CHECK_STEPS:-$DEFAULT_STEPS}; the end-to-end set: $UNIQUE distinct JPEGs and copies of them up to $E2E_IMAGES files; --precision $PREC."
fi
log "ok"
