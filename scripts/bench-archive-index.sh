#!/usr/bin/env bash
# measures: go.mod cmd fs cache
# Benchmark (make bench; issue 36 items 7 and 8): listing a tar of many
# members against the same names as plain files. A local-directory source
# holds big/data.tar (BENCH_ARCHIVE_MEMBERS members of 1 byte) and another
# the same paths as empty files (big/data/...); a fresh mount of each (the
# near-free tiny model, --prefetch off, --device cpu, --metadata-cache-size
# at its default) lists the members' directory under
# MOUNT/features/tiny/layer0/big/data with one os.listdir (first, then a
# second), and reads the mount's peak RSS (VmHWM), its RSS after and its
# stats (fs.metadata_bytes, archives.index_bytes). Names: short (n0000000.jpg)
# and long (800-byte member paths: three 180-byte directories and a 251-byte
# base name). BENCH_ROUNDS interleaved rounds (the order rotating); figures:
# median (min-max). Prints one markdown section (make bench keeps it in
# docs/bench/archive-index.md); progress on stderr.
#
#   scripts/bench-archive-index.sh     (after make build)
# Env: BENCH_ARCHIVE_MEMBERS (100000), BENCH_ROUNDS (3),
#      BENCH_ARCHIVE_NAMES ("short long").
set -euo pipefail
. "$(dirname "$0")/lib.sh"
MEMBERS=${BENCH_ARCHIVE_MEMBERS:-100000}
ROUNDS=${BENCH_ROUNDS:-3}
NAMES=${BENCH_ARCHIVE_NAMES:-short long}
for v in MEMBERS ROUNDS; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$v=${!v}: want a positive integer" >&2; exit 1; }
done
need_bin
WORK=$(mktemp -d "/tmp/featurefs-bench-archive.XXXXXX")
MNT=$WORK/mnt
MINIO_PID=
trap epoch_cleanup EXIT
mkdir -p "$MNT"
MODEL=$WORK/tiny.onnx
"$PY" "$REPO/scripts/bench_delivery.py" export --out "$MODEL" 2>/dev/null
S="$PY $REPO/scripts/bench_archive_index.py"

# run_kind KIND FILE (run_rounds): a fresh mount of $WORK/$NAME/KIND lists
# big/$SUB.
run_kind() {
  local kind=$1 out=$2 tag pid
  tag=$NAME-$(basename "$out" .json)
  featurefs_mount --model "tiny=$MODEL" --cache-dir "$WORK/cache-$tag" --log-file "$WORK/featurefs-$tag.log" \
    --device cpu --prefetch off "$WORK/$NAME/$kind" "$MNT" 2>/dev/null
  wait_mounted "$MNT"
  pid=${MOUNT_PIDS[$MNT]}
  $S ls --dir "$MNT/features/tiny/layer0/big/$SUB" --pid "$pid" --mnt "$MNT" >"$out"
  echo "bench-archive-index: $tag: $(cat "$out")" >&2
  unmount "$MNT"
  rm -rf "$WORK/cache-$tag"
}
FILES=()
for NAME in $NAMES; do
  echo "bench-archive-index: $MEMBERS members, $NAME names..." >&2
  SUB=$($S tree --out "$WORK/$NAME" --members "$MEMBERS" --names "$NAME")
  mkdir -p "$WORK/r/$NAME"
  run_rounds --load "bench-archive-index: $NAME" "$ROUNDS" "$WORK/r/$NAME" plain tar
  FILES+=("$WORK/r/$NAME"/r*-*.json)
  rm -rf "${WORK:?}/$NAME"
done
echo "## Archive index: listing a tar of $MEMBERS members against the same names as plain files"
echo
echo "A local-directory source holding big/data.tar ($MEMBERS members of 1 byte, PAX headers) and one holding the same paths as empty files; a fresh mount and cache of each (the tiny model, \`--prefetch off --device cpu\`, \`--metadata-cache-size\` at its default, 256 MiB) lists the members' directory with one \`os.listdir\` (first, then a second); the mount's VmHWM (peak RSS) and VmRSS and its stats after. Names: short (\`n0000000.jpg\`) and long (800-byte member paths: three 180-byte directories and a 251-byte base name). $ROUNDS interleaved rounds; figures: median (min-max)."
echo
$S report --rounds "${FILES[@]}"
