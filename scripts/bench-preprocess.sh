#!/usr/bin/env bash
# Benchmark (make bench): single-threaded preprocessing throughput of one
# 500x375 4:2:0 JPEG (ImageNet's typical size): featurefs's Go
# Preprocess.Apply (decode, Resize(256), CenterCrop(224), normalize) vs
# PIL + torchvision 0.14's transform on the same bytes, in one run. Prints
# one markdown section on stdout.
#
#   scripts/bench-preprocess.sh
# Env: BENCH_SECONDS (3): time per side.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=/usr/bin/python3
SECS=${BENCH_SECONDS:-3}
WORK=$(mktemp -d /tmp/featurefs-bench-pre.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

"$PY" - "$WORK/img.jpg" <<'PYEOF'
import sys
import numpy as np
from PIL import Image
rng = np.random.default_rng(1)
y, x = np.mgrid[0:375, 0:500].astype(np.float64)
img = np.stack([127 + 127 * np.sin(x / 40), 255 * y / 374, np.where((x // 17 + y // 13) % 2, 230, 20)], -1)
img = np.clip(img + rng.normal(0, 18, img.shape), 0, 255).astype(np.uint8)
Image.fromarray(img).save(sys.argv[1], quality=90)
PYEOF

cd "$REPO"
GO_OUT=$(FEATUREFS_BENCH_IMAGE="$WORK/img.jpg" go test ./extractor/ -run '^$' -bench 'BenchmarkPreprocess' \
  -benchtime "${SECS}s" -count 1 2>&1)
rate() { echo "$GO_OUT" | awk -v n="$1" '$1 ~ n {for (i=1;i<=NF;i++) if ($(i+1)=="images/s") print $i}' | head -1; }
GO_APPLY=$(rate 'Preprocess/apply')
GO_DEC=$(rate 'Preprocess/jpeg-decode-only')
GO_RS=$(rate 'Preprocess/resize-crop-only')
if [ -z "$GO_APPLY" ]; then echo "$GO_OUT" >&2; exit 1; fi
PY_RATE=$("$PY" "$REPO/scripts/ref_preprocess.py" bench "$SECS" "$WORK/img.jpg" | cut -d" " -f1)
RATIO=$(awk -v a="$GO_APPLY" -v b="$PY_RATE" 'BEGIN { printf "%.2f", a / b }')
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)

cat <<MD
## Preprocessing (decode + resize + crop + normalize)

\`scripts/bench-preprocess.sh\` (one 500x375 quality-90 4:2:0 JPEG, one thread per side, ${SECS}s each;
$(nproc) CPUs, load average $LOAD during the run)

| pipeline | images/s |
|---|---|
| featurefs Go \`Preprocess.Apply\` | $GO_APPLY |
| PIL 9.4 + torchvision 0.14 (\`Image.open().convert("RGB")\`, Resize/CenterCrop/ToTensor/Normalize) | $PY_RATE |
| **ratio Go / PIL+torchvision** | **$RATIO** |
| (Go \`image/jpeg\` decode alone, the floor) | $GO_DEC |
| (Go resize + crop alone, on decoded RGB) | $GO_RS |

Output equals torchvision's bit for bit for PNG inputs; for JPEGs the IDCT differs (Go's vs
libjpeg-turbo's ISLOW), see \`go test ./extractor -run TestPreprocessMatchesTorchvision -v\`.
MD
