# Shared helpers for scripts/demo.sh and scripts/bench-*.sh (source it).
# shellcheck shell=bash

PY=/usr/bin/python3
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEPS=${FEATUREFS_DEPS:-$HOME/.cache/featurefs}
export FEATUREFS_ORT_LIB=${FEATUREFS_ORT_LIB:-$DEPS/lib/onnxruntime-1.29.0/libonnxruntime.so.1}
BIN=${FEATUREFS_BIN:-$REPO/bin/featurefs}

# bench_stamp COMMAND LOAD_BEFORE [MEASURES [SECONDS]]: the one header line
# of a bench file (scripts/bench.sh writes it; no script writes its own):
# the commit (with "-dirty" when the tree has changes other than to bench
# files), the date, the CPU
# model and count, the kernel, the exact command, the load average before
# and now, the run's wall time and the code it measures (the bench script's
# "# measures:" paths), which make bench-docs compares with later commits to
# mark the file stale. Its form is fixed: TestBenchFilesAreStamped and the
# Makefile's staleness check parse it.
bench_stamp() {
  local commit m=""
  commit=$(git -C "$REPO" rev-parse --short=7 HEAD 2>/dev/null || echo unknown)
  # Dirty: changes other than bench files (an earlier area's fresh section).
  git -C "$REPO" diff --quiet HEAD -- . ':(exclude)docs/bench' ':(exclude)docs/BENCHMARKS.md' 2>/dev/null ||
    commit="$commit-dirty"
  [ -z "${3:-}" ] || m="; measures: $(printf '`%s` ' $3 | sed 's/ $//')"
  echo "Measured at commit $commit, $(date -u +%Y-%m-%d), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, kernel $(uname -r); command: \`$1\`; load average $2 before, $(cut -d' ' -f1-3 /proc/loadavg) after${4:+; ${4} s wall}$m."
}

# bench_measures SCRIPT: the paths a bench script's "# measures:" line names
# (the code whose change makes its figures stale); fails where it has none.
bench_measures() {
  local m
  m=$(sed -nE 's/^# measures: (.*)$/\1/p' "$1" | head -1)
  [ -n "$m" ] || { echo "$1 has no '# measures: PATH...' line (the code it measures)" >&2; return 1; }
  echo "$m"
}

# bench_code_changed: whether the unified diff on stdin changes a line of
# code: one that is not blank and not a // comment (//go:, //export and
# cgo's // #... lines are code). It reads the whole diff, so that the git
# command before it never dies of SIGPIPE under pipefail.
bench_code_changed() {
  awk '
    /^(\+\+\+|---) / { next }
    /^[+-]/ { l = substr($0, 2)
      if (l ~ /^[[:space:]]*$/) next
      if (l ~ /^[[:space:]]*\/\// && l !~ /^[[:space:]]*\/\/(go:|export |[[:space:]]*#)/) next
      code = 1 }
    END { exit !code }'
}

# bench_freshness FILE: where a bench file was measured and whether the
# code it measures changed since, against $REPO's HEAD: "current: ...",
# "stale: ..." or "no stamp: ...". The stamp (bench_stamp) names the commit
# and the paths; a change to tests alone changes nothing measured.
bench_freshness() {
  local line commit paths n newest
  line=$(grep -m1 '^Measured at commit ' "$1" || true)
  if [ -z "$line" ]; then echo "no stamp: written before the harness (scripts/bench.sh), its commit unrecorded"; return; fi
  commit=$(sed -E 's/^Measured at commit ([0-9a-f]+).*/\1/' <<<"$line")
  paths=$(grep -oE '; measures: .*' <<<"$line" | grep -oE '`[^`]+`' | tr -d '`' | tr '\n' ' ' || true)
  [ -n "$paths" ] || paths="go.mod cmd fs extractor cache mountopts"
  if ! git -C "$REPO" cat-file -e "$commit^{commit}" 2>/dev/null; then echo "stale: measured at $commit, which this history lacks"; return; fi
  # Stale where the code there differs from the commit's (a change
  # reverted since changes nothing); the commits counted are those that
  # changed code there.
  local changed=() c shown=$commit
  case $line in "Measured at commit $commit-dirty"*) shown="$commit-dirty" ;; esac
  # shellcheck disable=SC2086
  if ! git -C "$REPO" diff --unified=0 "$commit" HEAD -- $paths ':(exclude)*_test.go' | bench_code_changed; then
    echo "current: measured at $shown"
    return
  fi
  # shellcheck disable=SC2086
  for c in $(git -C "$REPO" rev-list "$commit..HEAD" -- $paths ':(exclude)*_test.go'); do
    git -C "$REPO" show --format= --unified=0 "$c" -- $paths ':(exclude)*_test.go' | bench_code_changed &&
      changed+=("$(git -C "$REPO" rev-parse --short=7 "$c")")
  done
  n=${#changed[@]}
  newest=${changed[0]}
  echo "stale: measured at $shown; $n later commit(s) change what it measures ($(echo $paths | sed 's/ /, /g')), the newest $newest"
}

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

# MOUNT_PIDS maps a mount point to the pid of the featurefs serving it.
declare -A MOUNT_PIDS=()

# featurefs_mount ARGS... SOURCE DIR: featurefs mount (in the background, as a
# user runs it), remembering the serving process's pid for unmount.
featurefs_mount() {
  local dir=${!#} out pid
  out=$("$BIN" mount "$@" 2>&1) || { echo "$out" >&2; return 1; }
  echo "$out" >&2
  pid=$(sed -n 's/.*(pid \([0-9]*\),.*/\1/p' <<<"$out" | head -1)
  [ -n "$pid" ] && MOUNT_PIDS[$dir]=$pid
  return 0
}

# unmount DIR: umount, wait until it is gone and the serving process has
# exited (it releases the cache directory's lock last).
unmount() {
  local dir=$1 i pid=${MOUNT_PIDS[$1]:-}
  if mountpoint -q "$dir"; then
    umount "$dir" 2>/dev/null || fusermount3 -u "$dir" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do
      mountpoint -q "$dir" || break
      sleep 0.1
    done
    if mountpoint -q "$dir"; then
      umount -l "$dir" 2>/dev/null || true
      return 1
    fi
  fi
  if [ -n "$pid" ]; then
    for ((i = 0; i < 300; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    unset "MOUNT_PIDS[$dir]"
    if kill -0 "$pid" 2>/dev/null; then
      echo "featurefs (pid $pid) still running 30s after unmounting $dir" >&2
      return 1
    fi
  fi
  return 0
}

# start_minio DIR LOG: MinIO on 127.0.0.1 only, with what keeps it local (as
# test/testenv/minio.go), serving DIR; exports fresh root credentials as
# AWS_* for the clients, sets MINIO_PID and ENDPOINT, and waits until ready.
start_minio() {
  local dir=$1 log=$2 port cport i
  port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  cport=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  export AWS_ACCESS_KEY_ID=bench$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
  export AWS_SECRET_ACCESS_KEY=$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')
  export AWS_REGION=us-east-1 AWS_CONFIG_FILE=/nonexistent AWS_SHARED_CREDENTIALS_FILE=/nonexistent
  MINIO_ROOT_USER=$AWS_ACCESS_KEY_ID MINIO_ROOT_PASSWORD=$AWS_SECRET_ACCESS_KEY MINIO_BROWSER=off MINIO_UPDATE=off \
    MINIO_CALLHOME_ENABLE=off MINIO_CI_CD=1 MINIO_SCANNER_SPEED=slowest \
    "$DEPS/bin/minio" server --quiet --anonymous --address "127.0.0.1:$port" --console-address "127.0.0.1:$cport" \
    "$dir" >"$log" 2>&1 &
  MINIO_PID=$!
  ENDPOINT=http://127.0.0.1:$port
  for ((i = 0; i < 600; i++)); do
    curl -sf "$ENDPOINT/minio/health/ready" >/dev/null 2>&1 && return 0
    kill -0 "$MINIO_PID" 2>/dev/null || { echo "minio exited" >&2; return 1; }
    sleep 0.1
  done
  echo "minio not ready after 60s" >&2
  return 1
}

# epoch_setup BUCKET TAG FLAG: the setup scripts/bench-epoch.sh and
# bench-featurestore.sh share: checks (the binary must have --FLAG), the
# BENCH_* settings (IMAGES, ROUNDS, CLASSES, WORKERS, THREADS), a work
# directory WORK with a mount point MNT removed on exit (with the logs'
# tails on failure), MinIO (start_minio), BENCH_IMAGES generated JPEGs
# uploaded to BUCKET under train/, and MODEL.
epoch_setup() {
  local bucket=$1 tag=$2 flag=$3 per_class
  need_bin
  "$PY" -c 'import boto3' 2>/dev/null || { echo "$PY lacks boto3: run scripts/install-deps.sh" >&2; exit 1; }
  [ -x "$DEPS/bin/minio" ] || { echo "no $DEPS/bin/minio: run scripts/install-deps.sh" >&2; exit 1; }
  # the help text first, then grep: grep -q stops reading at its match, and
  # the SIGPIPE featurefs then gets would fail the pipe under pipefail
  grep -q -- "-$flag" <<<"$("$BIN" mount -h 2>&1)" || { echo "$BIN has no --$flag flag: rebuild (make build)" >&2; exit 1; }
  IMAGES=${BENCH_IMAGES:-200}
  ROUNDS=${BENCH_ROUNDS:-3}
  [[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_ROUNDS=$ROUNDS: want a positive integer" >&2; exit 1; }
  CLASSES=${BENCH_CLASSES:-4}
  WORKERS=${BENCH_WORKERS:-4}
  THREADS=${BENCH_THREADS:-2}
  WORK=$(mktemp -d "/tmp/featurefs-bench-$tag.XXXXXX")
  MNT=$WORK/mnt
  MINIO_PID=
  trap epoch_cleanup EXIT
  mkdir -p "$MNT" "$WORK/minio"
  start_minio "$WORK/minio" "$WORK/minio.log"
  per_class=$(( (IMAGES + CLASSES - 1) / CLASSES ))
  "$PY" "$REPO/scripts/gen_dataset.py" --out "$WORK/images" --classes "$CLASSES" --train "$per_class" --val 0 \
    --formats jpg --min-side 160 --max-side 640 2>/dev/null
  rm -f "$WORK/images/manifest.json"
  "$PY" "$REPO/scripts/bench_epoch.py" upload --endpoint "$ENDPOINT" --bucket "$bucket" --dir "$WORK/images" >/dev/null
  MODEL=$(model_path resnet50)
}

# epoch_cleanup: epoch_setup's exit trap.
epoch_cleanup() {
  local rc=$?
  unmount "$MNT" || true
  if [ -n "$MINIO_PID" ]; then kill "$MINIO_PID" 2>/dev/null || true; wait "$MINIO_PID" 2>/dev/null || true; fi
  if [ $rc -ne 0 ]; then
    for f in "$WORK"/featurefs-*.log "$WORK/minio.log"; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }; done
  fi
  rm -rf "$WORK"
  exit $rc
}

# run_rounds [--load] NAME ROUNDS DIR KIND...: a benchmark's ROUNDS
# interleaved rounds, each running every KIND once in an order that rotates
# one place a round (round 1 as given, round 2 from the second KIND, ...).
# Each run is the caller's run_kind KIND FILE, FILE being DIR/rR-KIND.json;
# progress on stderr ("NAME: round R/ROUNDS: KIND...", with the 1-minute
# load average before each run under --load). Sets ROUND_ARGS to the
# report's arguments: --round KIND=FILE... for each round.
run_rounds() {
  local load=
  [ "$1" = --load ] && { load=1; shift; }
  local name=$1 rounds=$2 dir=$3 r kind note
  shift 3
  local kinds=("$@") spec
  ROUND_ARGS=()
  for ((r = 0; r < rounds; r++)); do
    rotated "$r" "${kinds[@]}"
    spec=()
    for kind in "${ROTATED[@]}"; do
      note=
      [ -n "$load" ] && note=" (load $(cut -d' ' -f1 /proc/loadavg))"
      echo "$name: round $((r + 1))/$rounds: $kind$note..." >&2
      run_kind "$kind" "$dir/r$((r + 1))-$kind.json"
      spec+=("$kind=$dir/r$((r + 1))-$kind.json")
    done
    ROUND_ARGS+=(--round "${spec[@]}")
  done
}

# rotated R ITEM...: sets ROTATED to the ITEMs rotated R places (R modulo
# their count): round R+1's order in interleaved rounds (run_rounds,
# gpu-check.sh).
rotated() {
  local k=$(($1 % ($# - 1)))
  shift
  ROTATED=("${@:k+1}" "${@:1:k}")
}

# need_bin: fail unless the featurefs binary and the dependencies are there.
need_bin() {
  [ -x "$BIN" ] || { echo "no $BIN: run 'make build' (or make demo)" >&2; exit 1; }
  [ -s "$FEATUREFS_ORT_LIB" ] || { echo "no $FEATUREFS_ORT_LIB: run scripts/install-deps.sh" >&2; exit 1; }
  "$PY" -c 'import torch, torchvision, numpy, PIL' 2>/dev/null ||
    { echo "$PY lacks torch/torchvision/numpy/PIL: run scripts/install-deps.sh" >&2; exit 1; }
}

# gen_extract_jpegs DIR N: N seeded 500x375 quality-90 JPEGs (waves, stripes,
# ellipses, noise) in DIR, the extraction benchmarks' images
# (bench-extract.sh, compare-ort.sh).
gen_extract_jpegs() {
  "$PY" - "$1" "$2" <<'PYEOF'
import os, sys
import numpy as np
from PIL import Image, ImageDraw
out, n = sys.argv[1], int(sys.argv[2])
os.makedirs(out)
rng = np.random.default_rng(3)
y, x = np.mgrid[0:375, 0:500].astype(np.float64)
for i in range(n):
    a = np.stack([127 + 127 * np.sin(x / rng.uniform(20, 60)), 255 * y / 374,
                  np.where((x // rng.integers(9, 30) + y // 13) % 2, 230, 20)], -1)
    a = np.clip(a + rng.normal(0, 18, a.shape), 0, 255).astype(np.uint8)
    im = Image.fromarray(a)
    d = ImageDraw.Draw(im)
    for _ in range(4):
        x0, x1 = sorted(rng.integers(0, 500, 2).tolist()); y0, y1 = sorted(rng.integers(0, 375, 2).tolist())
        d.ellipse([x0, y0, x1, y1], fill=tuple(int(c) for c in rng.integers(0, 256, 3)))
    im.save(os.path.join(out, f"{i:04d}.jpg"), quality=90)
PYEOF
}

# bench_work TAG [CLEANUP]: sets WORK to a fresh scratch directory
# (/tmp/featurefs-TAG.XXXXXX), removed on exit after the script's CLEANUP
# command, if named (an unmount, a git worktree's removal); the script's
# exit status stands.
bench_work() {
  WORK=$(mktemp -d "/tmp/featurefs-$1.XXXXXX")
  BENCH_WORK_CLEANUP=${2:-}
  trap bench_work_exit EXIT
}

# bench_work_exit: bench_work's exit trap.
bench_work_exit() {
  local rc=$?
  [ -z "$BENCH_WORK_CLEANUP" ] || "$BENCH_WORK_CLEANUP" || true
  rm -rf "$WORK" || true
  exit $rc
}

# bench_py ARGS...: $PY with scripts/ on its module path, so that a script
# it runs (a heredoc: bench_py - ARGS <<'PYEOF') can import benchlib.
bench_py() {
  PYTHONPATH="$REPO/scripts${PYTHONPATH:+:$PYTHONPATH}" "$PY" "$@"
}

# need_netns NAME WHAT: fail unless root with tc, which the netns test bed
# (test/netns_test.go) needs for WHAT.
need_netns() {
  [ "$(id -u)" = 0 ] || { echo "$1 needs root ($2)" >&2; exit 1; }
  command -v tc >/dev/null || { echo "no tc: install iproute2" >&2; exit 1; }
}
