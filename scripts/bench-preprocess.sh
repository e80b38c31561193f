#!/usr/bin/env bash
# Benchmark (make bench): single-core JPEG decoding and preprocessing on a
# set of 500-800 px JPEGs (scripts/ref_preprocess.py genbench): decode only
# (to RGB) with the old Go decoder, with libjpeg-turbo (now) and with PIL;
# the whole preprocess (decode, Resize(256), CenterCrop(224), normalize)
# before and now and with PIL + torchvision 0.14. "Before" is the package
# at OLD_REV (the Go image/jpeg decoder with hand-written upsampling and
# colour conversion, the first resample), built from a git worktree with
# this tree's extractor/preprocess_bench_test.go. ROUNDS interleaved rounds;
# medians with min-max. Prints one markdown section on stdout.
#
#   scripts/bench-preprocess.sh
# Env: BENCH_SECONDS (2): time per measurement; BENCH_ROUNDS (5);
#      BENCH_JPEGS (32): number of images; OLD_REV (ab1c547, the last commit
#      before libjpeg-turbo; empty: no "before" columns).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
SECS=${BENCH_SECONDS:-2}
ROUNDS=${BENCH_ROUNDS:-5}
NIMG=${BENCH_JPEGS:-32}
OLD_REV=${OLD_REV-ab1c54742c589b31e1a65a75115e6755d3e61159}
WORK=$(mktemp -d /tmp/featurefs-bench-pre.XXXXXX)
cleanup() {
  if [ -d "$WORK/old" ]; then git -C "$REPO" worktree remove --force "$WORK/old" >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

"$PY" "$REPO/scripts/ref_preprocess.py" genbench "$WORK/img" "$NIMG"
IMGS=("$WORK"/img/*.jpg)
IMGSTAT=$("$PY" - "${IMGS[@]}" <<'PYEOF'
import os, sys
from PIL import Image
n = len(sys.argv) - 1
px = by = 0
sides = []
for p in sys.argv[1:]:
    w, h = Image.open(p).size
    px += w * h; by += os.path.getsize(p); sides.append(max(w, h))
print(f"{n} JPEGs, long side {min(sides)}-{max(sides)} px, mean {px / n / 1e3:.0f} kpixels and {by / n / 1024:.0f} KiB, {8 * by / px:.1f} bits/pixel, 4:2:0, quality 85-95")
PYEOF
)

cd "$REPO"
go test -c -o "$WORK/new.test" ./extractor/
HAVE_OLD=0
if [ -n "$OLD_REV" ] && git cat-file -e "$OLD_REV^{commit}" 2>/dev/null; then
  git worktree add --detach "$WORK/old" "$OLD_REV" >/dev/null 2>&1
  cp extractor/preprocess_bench_test.go "$WORK/old/extractor/"
  (cd "$WORK/old" && go test -c -o "$WORK/old.test" ./extractor/)
  HAVE_OLD=1
fi

# gobench BIN REGEX: "name cpu-rate wall-rate" per sub-benchmark.
gobench() {
  FEATUREFS_BENCH_IMAGES="$WORK/img" "$1" -test.run '^$' -test.bench "$2" -test.benchtime "${SECS}s" -test.cpu 1 |
    awk '/images\/cpu-s/ { c = w = ""; for (i = 2; i <= NF; i++) { if ($i == "images/cpu-s") c = $(i-1); if ($i == "images/s") w = $(i-1) }
                           sub(/^BenchmarkPreprocess\//, "", $1); print $1, c, w }'
}
: >"$WORK/results"  # lines: key cpu-rate wall-rate
LOADS=()
for r in $(seq 1 "$ROUNDS"); do
  LOADS+=("$(cut -d' ' -f1 /proc/loadavg)")
  echo "round $r/$ROUNDS" >&2
  gobench "$WORK/new.test" 'BenchmarkPreprocess/(apply|decode|go-image-jpeg|resize-crop)$' | sed 's/^/new-/' >>"$WORK/results"
  if [ $HAVE_OLD = 1 ]; then
    gobench "$WORK/old.test" 'BenchmarkPreprocess/(apply|decode|resize-crop)$' | sed 's/^/old-/' >>"$WORK/results"
  fi
  echo "pil-decode $("$PY" scripts/ref_preprocess.py bench-decode "$SECS" "${IMGS[@]}" | awk '{print $2, $1}')" >>"$WORK/results"
  echo "pil-load $("$PY" scripts/ref_preprocess.py bench-decode --load-only "$SECS" "${IMGS[@]}" | awk '{print $2, $1}')" >>"$WORK/results"
  echo "pil-apply $("$PY" scripts/ref_preprocess.py bench "$SECS" "${IMGS[@]}" | awk '{print $2, $1}')" >>"$WORK/results"
done
LOADS+=("$(cut -d' ' -f1 /proc/loadavg)")

# stat KEY COL: "median (min-max)" of column COL (2 cpu, 3 wall) over rounds.
stat() {
  awk -v k="$1" -v c="$2" '$1 == k { print $c }' "$WORK/results" | sort -g |
    awk '{ v[NR] = $1 } END { if (NR == 0) { print "n/a"; exit }
      m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf "%.0f (%.0f-%.0f)", m, v[1], v[NR] }'
}
med() { stat "$1" 2 | cut -d' ' -f1; }
ratio() { awk -v a="$(med "$1")" -v b="$(med "$2")" 'BEGIN { if (a == "n/a" || b == "n/a" || b == 0) print "n/a"; else printf "%.2f", a / b }'; }
row() { echo "| $1 | $(stat "$2" 2) | $(stat "$2" 3) |"; }
CPU=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)

cat <<MD
## Preprocessing (decode + resize + crop + normalize)

\`scripts/bench-preprocess.sh\` (BENCH_SECONDS=$SECS BENCH_ROUNDS=$ROUNDS BENCH_JPEGS=$NIMG; Go:
\`go test -c ./extractor\` run as \`extractor.test -test.bench BenchmarkPreprocess -test.cpu 1\`
with \`FEATUREFS_BENCH_IMAGES\` set; PIL: \`scripts/ref_preprocess.py bench-decode\` and \`bench\`,
torch on 1 thread). $IMGSTAT (\`scripts/ref_preprocess.py genbench\`). One thread per
side, $ROUNDS interleaved rounds of ${SECS}s per measurement, **medians (min-max)**; $(nproc) CPUs
($CPU), 1-minute load average at the start of each round and at the end: ${LOADS[*]}.

"Per core" is images per CPU second of the benchmarking process (getrusage;
Python's \`time.process_time\`), which load from other processes on a shared machine
does not dilute the way it dilutes wall-clock rates (both shown). "Before" is the
package at \`${OLD_REV:0:7}\`: Go's \`image/jpeg\` with hand-written chroma upsampling and
colour conversion, and the first resample; "now" is libjpeg-turbo 2.1.5 (static, cgo)
configured as Pillow configures it, and the resample with cached taps and unrolled kernels.

| decode only, whole image to RGB | images per CPU s (per core) | images/s wall |
|---|---|---|
$(row "featurefs before: Go \`image/jpeg\` + Go upsampling/colour conversion" old-decode)
$(row "**featurefs now: libjpeg-turbo 2.1.5**" new-decode)
$(row "PIL 9.4 \`Image.open().convert(\"RGB\")\` + \`load()\` (same libjpeg-turbo)" pil-decode)
$(row "(PIL \`Image.open()\` + \`load()\` alone: the same decode into PIL's RGBX image, no \`convert\` copy)" pil-load)
$(row "(Go \`image/jpeg\` alone, to YCbCr planes, no RGB)" new-go-image-jpeg)

| whole preprocess (decode, resize 256, crop 224, normalize) | images per CPU s (per core) | images/s wall |
|---|---|---|
$(row "featurefs before" old-apply)
$(row "**featurefs now**" new-apply)
$(row "PIL 9.4 + torchvision 0.14 (Resize/CenterCrop/ToTensor/Normalize)" pil-apply)
$(row "(featurefs before: resize + crop alone, on decoded RGB)" old-resize-crop)
$(row "(featurefs now: resize + crop alone, on decoded RGB)" new-resize-crop)

| ratio of per-core medians | |
|---|---|
| **ratio Go / PIL+torchvision** | **$(ratio new-apply pil-apply)** |
| whole preprocess, now / before | $(ratio new-apply old-apply) |
| decode, now / before | $(ratio new-decode old-decode) |
| decode, libjpeg-turbo now / PIL \`open().convert("RGB")\` | $(ratio new-decode pil-decode) |
| decode, libjpeg-turbo now / PIL \`open().load()\` | $(ratio new-decode pil-load) |
| resize + crop, now / before | $(ratio new-resize-crop old-resize-crop) |

Pixels equal PIL's bit for bit for JPEG and PNG (\`go test ./extractor -run
'TestJPEGMatchesPIL|TestResizeMatchesPIL|TestPreprocessMatchesTorchvision'\`). The decoder
decodes every row and column, so that corruption anywhere fails as in PIL;
libjpeg's partial decoding (\`jpeg_crop_scanline\`, \`jpeg_skip_scanlines\`) was not used:
its pixels at the crop edges would need their own proof of bit-exactness, and skipping
to the end of the image stops reading, so a truncated tail would not fail as in PIL.
MD
