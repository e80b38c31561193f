#!/usr/bin/env bash
# The benchmark harness: runs scripts/bench-AREA.sh for each AREA named (all
# of them with none) and writes its markdown section to docs/bench/AREA.md,
# under a header line that no bench script writes for itself (bench_stamp in
# scripts/lib.sh): the commit (-dirty where the tree has changes), the date,
# the CPU model and count, the kernel, the exact command with the settings
# the script reads that were set, the load average before and after, the
# wall time, and the code the script measures (its "# measures:" line), from
# which make bench-docs marks a section stale once that code changes.
# A script's section is its stdout: a heading, then its text; the stamp goes
# after the first heading. A script that fails leaves docs/bench/AREA.md as
# it was and its output in docs/bench/AREA.md.failed.
#
#   scripts/bench.sh [AREA...]        e.g. BENCH_ROUNDS=3 scripts/bench.sh cache bucket
# make bench runs it for every area and then writes docs/BENCHMARKS.md.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$REPO"
areas=("$@")
if [ ${#areas[@]} = 0 ]; then
  for s in scripts/bench-*.sh; do a=${s#scripts/bench-}; areas+=("${a%.sh}"); done
fi
for area in "${areas[@]}"; do # check them all before running any
  [ -f "scripts/bench-$area.sh" ] || { echo "bench: no scripts/bench-$area.sh" >&2; exit 2; }
  bench_measures "scripts/bench-$area.sh" >/dev/null || exit 2
done
mkdir -p docs/bench
rc=0
for area in "${areas[@]}"; do
  s=scripts/bench-$area.sh
  measures=$(bench_measures "$s")
  # The command: the settings the script reads (${NAME:-default}) that are
  # set here, then the script; paths to the binary and libraries are not
  # settings.
  cmd=$s
  for v in $(grep -oE '\$\{[A-Z][A-Z0-9_]*:-' "$s" | sed -E 's/^\$\{//; s/:-$//' | sort -u); do
    case $v in FEATUREFS_BIN | FEATUREFS_ORT_LIB | FEATUREFS_DEPS | BIN_BEFORE) continue ;; esac
    [ -n "${!v:-}" ] && cmd="$v=${!v} $cmd"
  done
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  out=$(mktemp /tmp/featurefs-bench-"$area".XXXXXX.md)
  echo "== $s ($cmd)" >&2
  start=$(date +%s)
  if ! bash "$s" >"$out"; then
    mv "$out" "docs/bench/$area.md.failed"
    echo "bench: $s failed; its output is in docs/bench/$area.md.failed" >&2
    rc=1
    continue
  fi
  secs=$(($(date +%s) - start))
  stamp=$(bench_stamp "$cmd" "$load" "$measures" "$secs")
  final=$(mktemp /tmp/featurefs-bench-"$area".XXXXXX.md)
  awk -v stamp="$stamp" '
    !done && /^#+ / { print; print ""; print stamp; done = 1; gap = 1; next }
    gap { gap = 0; if ($0 != "") print "" }
    { print }
    END { if (!done) print stamp }' "$out" >"$final"
  rm -f "$out"
  mv "$final" "docs/bench/$area.md"
  chmod 644 "docs/bench/$area.md"
  rm -f "docs/bench/$area.md.failed"
  echo "bench: wrote docs/bench/$area.md ($secs s)" >&2
done
exit $rc
