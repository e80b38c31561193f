#!/usr/bin/env bash
# measures: go.mod cache/codec cache scripts/benchcodec
# Benchmark (make bench): the feature codec (cache/codec) on real features.
# Extracts BENCH_IMAGES images' features with `featurefs extract` at
# ResNet-50 layer12, layer17 and layer18 and ResNet-18 layer4 and layer6
# (seeded random weights), as float32 and float16, then measures each
# codec method over BENCH_ROUNDS interleaved rounds (scripts/benchcodec):
# bytes per feature, features per GiB of cache, encode and decode MB/s on
# one goroutine, and a 4 KiB partial read (a page the kernel asks for
# again). Prints one markdown section on stdout.
#
#   scripts/bench-codec.sh     (after make build)
# Env: BENCH_IMAGES (32), BENCH_ROUNDS (3).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_bin
IMAGES=${BENCH_IMAGES:-32}
ROUNDS=${BENCH_ROUNDS:-3}
bench_work bench-codec

"$PY" "$REPO/scripts/gen_dataset.py" --out "$WORK/images" --classes 2 --train $((IMAGES / 2)) --val 0 \
  --min-side 160 --max-side 640 2>/dev/null
mapfile -t IMGS < <(find "$WORK/images" -type f \( -name "*.jpg" -o -name "*.png" -o -name "*.jpeg" \) | sort)
SETS=()
for ml in resnet50:layer12 resnet50:layer17 resnet50:layer18 resnet18:layer4 resnet18:layer6; do
  model=${ml%%:*}; layer=${ml#*:}
  for dtype in float32 float16; do
    out="$WORK/f/$model-$layer-$dtype"
    echo "bench-codec: extracting $model $layer $dtype..." >&2
    "$BIN" extract --model "$(model_path "$model")" --layer "$layer" --dtype "$dtype" --device cpu \
      "${IMGS[@]}" -o "$out" >/dev/null
    SETS+=("$model $layer $dtype=$out")
  done
done
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
TABLE=$(cd "$REPO" && go run ./scripts/benchcodec -rounds "$ROUNDS" "${SETS[@]}")
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
S2=$(echo "$TABLE" | awk -F'|' '$2 ~ /resnet50 layer12 float32/ && $3 ~ /^ s2 $/ {gsub(/[ *x]/, "", $6); print $6}')

cat <<MD
## Codec: feature bytes in the cache, per method

$IMAGES generated images (160-640 px), their features
extracted by \`featurefs extract\` (torchvision models with seeded random weights) as float32 and float16 \`.npy\` files;
each codec method (cache/codec: 64 KiB chunks shuffled by element size, each compressed on its own) encodes, decodes
and reads 200 random 4 KiB ranges of every file, $ROUNDS rounds with the methods' order rotating: medians (min-max) on one
goroutine. Features per GiB: how many a 1 GiB cache holds as they are and compressed. The cache's default is s2
(\`--cache-compression\`). Load average (1, 5, 15 min) $LOAD0 before the codec's rounds (after the extraction), $LOAD1 after.

$TABLE

- ResNet-50 layer12 float32 in the cache (s2): **${S2}x** smaller (target >= 1.6x).
MD
