#!/usr/bin/env bash
# measures: go.mod extractor
# Benchmark (make bench): single-core JPEG decoding and preprocessing on a
# set of 500-800 px JPEGs (scripts/ref_preprocess.py genbench): decode only
# (to RGB) with the old Go decoder, with libjpeg-turbo (now) and with PIL;
# the whole preprocess (decode, Resize(256), CenterCrop(224), normalize)
# now and with PIL + torchvision 0.14, and, with OLD_REV set, "before": the
# package at that commit, built from a git worktree with this tree's
# extractor/preprocess_bench_test.go. Then --fast-decode on
# large photo-like JPEGs (scripts/ref_preprocess.py genlarge): the whole
# preprocess and the decode alone, exact and fast, per size class (4000x3000
# decoded at 1/8, 2000x1500 at 1/4, 800-1600 px at 1/2), PIL + torchvision
# and PIL's draft mode beside them; and its fidelity against torchvision
# at layer12 of the seeded ResNet-50 (go test -run TestFastDecodeFidelity
# with FEATUREFS_FASTDECODE_SET=full). ROUNDS interleaved rounds, every
# measurement in each; medians with min-max. Prints one markdown section on
# stdout.
#
#   scripts/bench-preprocess.sh
# Env: BENCH_SECONDS (2): time per measurement; BENCH_ROUNDS (5);
#      BENCH_JPEGS (32): number of images; OLD_REV (none: a commit whose
#      extractor builds with this tree's benchmark file; ab1c547, the last
#      before libjpeg-turbo, no longer does); BENCH_FIDELITY (1;
#      0: skip the fidelity run).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
SECS=${BENCH_SECONDS:-2}
ROUNDS=${BENCH_ROUNDS:-5}
NIMG=${BENCH_JPEGS:-32}
OLD_REV=${OLD_REV:-}
# the "before" package's git worktree goes with the work directory
cleanup() { [ ! -d "$WORK/old" ] || git -C "$REPO" worktree remove --force "$WORK/old" >/dev/null 2>&1; }
bench_work bench-pre cleanup

"$PY" "$REPO/scripts/ref_preprocess.py" genbench "$WORK/img" "$NIMG"
IMGS=("$WORK"/img/*.jpg)
# Large photos for --fast-decode, in groups of one size, scale and kind:
# entropy decoding, which the DCT scaling does not shrink, weighs most in
# progressive and 4:4:4 files, so each gets its own row.
"$PY" "$REPO/scripts/ref_preprocess.py" genlarge "$WORK/large"
LGROUPS=(l420 l444 lprog m420 mprog s)
declare -A GFILES=(
  [l420]="l420_4000x3000 l420b_4000x3000 l420_3000x3999 l422_3997x2995"
  [l444]="l444_4000x3000"
  [lprog]="lprog_4000x3000"
  [m420]="m420_2000x1500 m444_2000x1500 m420_1537x1029 s420_1600x1200"
  [mprog]="mprog_2000x1500"
  [s]="s420_1200x800 s444_800x1000 sprog_1023x767"
)
declare -A GSHORT=(
  [l420]="4000x3000 baseline 4:2:0/4:2:2, 1/8" [l444]="4000x3000 baseline 4:4:4, 1/8" [lprog]="4000x3000 progressive, 1/8"
  [m420]="2000x1500 baseline, 1/4" [mprog]="2000x1500 progressive, 1/4" [s]="800-1200 px, 1/2"
)
declare -A GLABEL=(
  [l420]="4000x3000 (one 3000x3999, one 3997x2995 4:2:2), baseline 4:2:0, quality 80-90: 4 JPEGs at 1/8"
  [l444]="4000x3000 baseline 4:4:4, quality 95: 1 JPEG at 1/8"
  [lprog]="4000x3000 progressive 4:2:0, quality 85: 1 JPEG at 1/8"
  [m420]="2000x1500 4:2:0 and 4:4:4, 1537x1029, 1600x1200, baseline: 4 JPEGs at 1/4"
  [mprog]="2000x1500 progressive 4:2:0: 1 JPEG at 1/4"
  [s]="1200x800 4:2:0, 800x1000 4:4:4, 1023x767 progressive: 3 JPEGs at 1/2"
)
for g in "${LGROUPS[@]}"; do
  mkdir -p "$WORK/large-$g"
  for n in ${GFILES[$g]}; do ln -s "$WORK/large/$n.jpg" "$WORK/large-$g/$n.jpg"; done
done
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

# gobench KEY- BIN REGEX [DIR] and pilbench KEY ARGS...: lines "KEY cpu-rate
# wall-rate" in the results, per sub-benchmark of the Go test binary BIN
# (KEY- and the sub-benchmark's name) or of scripts/ref_preprocess.py ARGS.
gobench() {
  FEATUREFS_BENCH_IMAGES="${4:-$WORK/img}" "$2" -test.run '^$' -test.bench "$3" -test.benchtime "${SECS}s" -test.cpu 1 |
    awk -v k="$1" '/images\/cpu-s/ { c = w = ""; for (i = 2; i <= NF; i++) { if ($i == "images/cpu-s") c = $(i-1); if ($i == "images/s") w = $(i-1) }
                           sub(/^Benchmark(Preprocess|FastDecode)\//, "", $1); print k $1, c, w }' >>"$WORK/results"
}
pilbench() { echo "$1 $("$PY" scripts/ref_preprocess.py "${@:2}" | awk '{print $2, $1}')" >>"$WORK/results"; }
: >"$WORK/results"
LOADS=()
for r in $(seq 1 "$ROUNDS"); do
  LOADS+=("$(cut -d' ' -f1 /proc/loadavg)")
  echo "round $r/$ROUNDS" >&2
  gobench new- "$WORK/new.test" 'BenchmarkPreprocess/(apply|decode|go-image-jpeg|resize-crop)$'
  if [ $HAVE_OLD = 1 ]; then
    gobench old- "$WORK/old.test" 'BenchmarkPreprocess/(apply|decode|resize-crop)$'
  fi
  pilbench pil-decode bench-decode "$SECS" "${IMGS[@]}"
  pilbench pil-load bench-decode --load-only "$SECS" "${IMGS[@]}"
  pilbench pil-apply bench "$SECS" "${IMGS[@]}"
  for g in "${LGROUPS[@]}"; do
    gobench "large-$g-" "$WORK/new.test" 'BenchmarkFastDecode/(exact|fast|decode-exact|decode-fast)$' "$WORK/large-$g"
    pilbench "large-$g-pil" bench "$SECS" "$WORK/large-$g"/*.jpg
    pilbench "large-$g-pil-draft" bench --draft "$SECS" "$WORK/large-$g"/*.jpg
  done
done
LOADS+=("$(cut -d' ' -f1 /proc/loadavg)")

# Fidelity of --fast-decode against torchvision (every large image).
FIDELITY="(not run: BENCH_FIDELITY=0)"
FIDLOAD=""
if [ "${BENCH_FIDELITY:-1}" != 0 ]; then
  echo "fidelity: go test -run TestFastDecodeFidelity (FEATUREFS_FASTDECODE_SET=full)" >&2
  FIDLOAD="$(cut -d' ' -f1 /proc/loadavg)"
  if FEATUREFS_FASTDECODE_SET=full FEATUREFS_FASTDECODE_REPORT="$WORK/fidelity.md" \
    go test -count=1 -timeout 60m -run '^TestFastDecodeFidelity$' ./extractor/ >"$WORK/fidelity.log" 2>&1; then
    FIDELITY="$(cat "$WORK/fidelity.md")"
  else
    tail -40 "$WORK/fidelity.log" >&2
    FIDELITY="$(cat "$WORK/fidelity.md" 2>/dev/null)

**TestFastDecodeFidelity failed** (the bar is not met, or the run broke: see above on stderr)."
  fi
  FIDLOAD="$FIDLOAD $(cut -d' ' -f1 /proc/loadavg)"
fi
LARGESTAT=$("$PY" - "$WORK"/large/*.jpg <<'PYEOF'
import os, sys
from PIL import Image
n = len(sys.argv) - 1
by = sum(os.path.getsize(p) for p in sys.argv[1:])
px = sum(Image.open(p).size[0] * Image.open(p).size[1] for p in sys.argv[1:])
print(f"{n} JPEGs, {px / n / 1e6:.1f} megapixels and {by / n / 2**20:.1f} MiB on average, {8 * by / px:.1f} bits/pixel")
PYEOF
)

# stat KEY COL [DEC]: "median (min-max)" of column COL (2 cpu, 3 wall) over rounds.
# DEC (0) decimals.
stat() {
  awk -v k="$1" -v c="$2" '$1 == k { print $c }' "$WORK/results" | sort -g |
    awk -v f="%.${3:-0}f" '{ v[NR] = $1 } END { if (NR == 0) { print "n/a"; exit }
      m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf f " (" f "-" f ")", m, v[1], v[NR] }'
}
med() { stat "$1" 2 2 | cut -d" " -f1; }
ratio() { awk -v a="$(med "$1")" -v b="$(med "$2")" 'BEGIN { if (a == "n/a" || b == "n/a" || b == 0) print "n/a"; else printf "%.2f", a / b }'; }
# row LABEL KEY and ratiorow LABEL A B: nothing where a key has no figures
# (no OLD_REV: no "before").
row() { grep -q "^$2 " "$WORK/results" || return 0; echo "| $1 | $(stat "$2" 2) | $(stat "$2" 3) |"; }
ratiorow() { grep -q "^$3 " "$WORK/results" || return 0; echo "| $1 | $(ratio "$2" "$3") |"; }
if [ $HAVE_OLD = 1 ]; then
  BEFORE="\"Before\" is the
package at \`${OLD_REV:0:7}\`, built from a git worktree with this tree's benchmark file; \"now\" is"
else
  BEFORE="\"Now\" is"
fi

cat <<MD
## Preprocessing (decode + resize + crop + normalize)

\`scripts/bench-preprocess.sh\` (BENCH_SECONDS=$SECS BENCH_ROUNDS=$ROUNDS BENCH_JPEGS=$NIMG; Go:
\`go test -c ./extractor\` run as \`extractor.test -test.bench BenchmarkPreprocess -test.cpu 1\`
with \`FEATUREFS_BENCH_IMAGES\` set; PIL: \`scripts/ref_preprocess.py bench-decode\` and \`bench\`,
torch on 1 thread). $IMGSTAT (\`scripts/ref_preprocess.py genbench\`). One thread per
side, $ROUNDS interleaved rounds of ${SECS}s per measurement, **medians (min-max)**;
1-minute load average at the start of each round and at the end: ${LOADS[*]}.

"Per core" is images per CPU second of the benchmarking process (getrusage;
Python's \`time.process_time\`), which load from other processes on a shared machine
does not dilute the way it dilutes wall-clock rates (both shown). $BEFORE libjpeg-turbo 2.1.5 (static, cgo)
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
$(ratiorow "whole preprocess, now / before" new-apply old-apply)
$(ratiorow "decode, now / before" new-decode old-decode)
| decode, libjpeg-turbo now / PIL \`open().convert("RGB")\` | $(ratio new-decode pil-decode) |
| decode, libjpeg-turbo now / PIL \`open().load()\` | $(ratio new-decode pil-load) |
$(ratiorow "resize + crop, now / before" new-resize-crop old-resize-crop)

Pixels equal PIL's bit for bit for JPEG and PNG (\`go test ./extractor -run
'TestJPEGMatchesPIL|TestResizeMatchesPIL|TestPreprocessMatchesTorchvision'\`). The decoder
decodes every row and column, so that corruption anywhere fails as in PIL;
libjpeg's partial decoding (\`jpeg_crop_scanline\`, \`jpeg_skip_scanlines\`) was not used:
its pixels at the crop edges would need their own proof of bit-exactness, and skipping
to the end of the image stops reading, so a truncated tail would not fail as in PIL.

### \`--fast-decode\` on large photos

\`--fast-decode\` (off by default; \`mount\`, \`serve\`, \`warm --source\`, \`extract\`; config file
\`fast-decode: true\`) decodes a JPEG whose shorter side is at least 8, 4 or 2 times the resize
size (256) at 1/8, 1/4 or 1/2 of its size with libjpeg's DCT-domain scaling, then resizes the
decoded image's extent to the size torchvision's Resize gives the original: the same steps as
PIL's \`Image.draft("RGB", (w//D, h//D))\` + \`resize(size, BILINEAR, box=draft's box)\`, and
the pixels equal those of PIL doing that byte for byte (\`go test ./extractor -run
TestFastDecodeMatchesPILDraft\`). Images with a shorter side under 512 px, and PNGs, take the
exact path. It is part of the cache key: fast and exact features never share a cache.

Speed, measured in the same $ROUNDS interleaved rounds as the tables above (load averages
above), one thread, over $LARGESTAT (\`scripts/ref_preprocess.py genlarge\`: 1/f-noise
textures in several tints occluding one another through sharp-edged shapes, a lens-like blur and
sensor noise; quality 80-95), per group of images; Go: \`extractor.test -test.bench
BenchmarkFastDecode -test.cpu 1\` with \`FEATUREFS_BENCH_IMAGES\` the group's directory; PIL:
\`scripts/ref_preprocess.py bench [--draft]\`. Images per CPU second over the group's
images in turn (so the slower images weigh more), **medians (min-max)**:

| decode + preprocess (resize 256, crop 224, normalize) | featurefs exact | **featurefs \`--fast-decode\`** | **speed-up** | PIL + torchvision | PIL \`draft\` + \`resize(box)\` + torchvision |
|---|---|---|---|---|---|
$(for g in "${LGROUPS[@]}"; do
  echo "| ${GLABEL[$g]} | $(stat large-$g-exact 2 1) | $(stat large-$g-fast 2 1) | **$(ratio large-$g-fast large-$g-exact)x** | $(stat large-$g-pil 2 1) | $(stat large-$g-pil-draft 2 1) |"
done)

| decode only, whole image to RGB | exact (full size) | at the scale \`--fast-decode\` picks | speed-up | wall-clock images/s, preprocess exact | fast |
|---|---|---|---|---|---|
$(for g in "${LGROUPS[@]}"; do
  echo "| ${GSHORT[$g]} | $(stat large-$g-decode-exact 2 1) | $(stat large-$g-decode-fast 2 1) | $(ratio large-$g-decode-fast large-$g-decode-exact)x | $(stat large-$g-exact 3 1) | $(stat large-$g-fast 3 1) |"
done)

The DCT scaling skips most of the inverse DCT, the chroma upsampling and the colour
conversion, and leaves the resize little to do, but every coefficient must still be
entropy-decoded: the gain is largest on baseline 4:2:0 files and smallest where Huffman
decoding dominates (progressive files, decoded in several slow passes over a whole-image
coefficient buffer, and high-quality 4:4:4 ones). That buffer (36 MB for a 4000x3000 4:2:0
progressive photo) comes from memory each preprocessing worker keeps for the next image
(\`extractor/jpegdec.c\`, at most 48 MiB a worker): allocated afresh, its page faults had cost
as much as the decode, exact or fast.

Fidelity against torchvision: layer12 (\`layer3.3\`, 1024x14x14) of the seeded ResNet-50
(\`scripts/export_model.py\`, random weights, randomized BN statistics) computed by featurefs with
\`--fast-decode\` (and without, for comparison) against torchvision's exact transform and
forward pass on PIL-decoded images (\`scripts/ref_features.py\`), cosine similarity per image, on
all $(ls "$WORK"/large/*.jpg | wc -l) large JPEGs (adds grayscale and CMYK at 1/8 and 1/4, and a 640x480 image that is not
scaled). Command: \`FEATUREFS_FASTDECODE_SET=full FEATUREFS_FASTDECODE_REPORT=FILE go test
-run TestFastDecodeFidelity ./extractor\` (the test asserts the bar; without
\`FEATUREFS_FASTDECODE_SET\` it runs on 4 of the images, one per scale and CMYK), 1-minute load
average before and after: $FIDLOAD.

$FIDELITY

$(if [ -f "$WORK/fidelity.md" ] && ! grep -q 'NOT met' "$WORK/fidelity.md"; then
  echo "**Verdict: \`--fast-decode\` meets the fidelity bar (cosine mean >= 0.999 and min >= 0.995 at layer12)"
  echo "over all images and at each of 1/8, 1/4 and 1/2, so all three scales are used.**"
elif [ -f "$WORK/fidelity.md" ]; then
  echo "**Verdict: the bar (cosine mean >= 0.999, min >= 0.995 at layer12) is NOT met where the table says so:"
  echo "restrict \`fastDecodeDenoms\` (extractor/preprocess.go) to the scales that meet it.**"
fi)
The reference model has random weights: a trained network may weigh fine texture differently,
and these images are synthetic. The difference between the two paths is only how the
image is low-passed before sampling (an 8x8, 4x4 or 2x2 DCT-domain reduction, then an
antialiased bilinear reduction by a factor between 1 and 2, instead of one bilinear filter as
wide as the whole reduction); the geometry is the same.
MD
