#!/usr/bin/env bash
# Benchmark (make bench): CPU extraction throughput of ResNet-50 layer12 and
# layer18 on the same set of 500x375 JPEGs, featurefs (Go decode/preprocess
# workers overlapped with batched ONNX Runtime) vs PyTorch eager (torchvision
# + PIL, DataLoader with workers, same thread count), in one run. Prints one
# markdown section on stdout.
#
#   scripts/bench-extract.sh
# Env: BENCH_IMAGES (64): number of JPEGs; BENCH_WORKERS (2): DataLoader workers.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
N=${BENCH_IMAGES:-64}
WORKERS=${BENCH_WORKERS:-2}
THREADS=$(nproc)
WORK=$(mktemp -d /tmp/featurefs-bench-extract.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
MODEL=$(model_path resnet50)

"$PY" - "$WORK/img" "$N" <<'PYEOF'
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

cd "$REPO"
go build -o "$WORK/benchextract" ./scripts/benchextract 2> >(grep -v "cgo-gcc\|nvml.h\|DEPRECATED\|^ *|\|^[0-9]* |\|go-nvml" >&2 || true)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
FF=$("$WORK/benchextract" --model "$MODEL" --images "$WORK/img" --layers layer12,layer18 --threads "$THREADS" 2>"$WORK/ff.log") || { cat "$WORK/ff.log" >&2; exit 1; }
PT=$("$PY" "$REPO/scripts/bench_torch_extract.py" --images "$WORK/img" --threads "$THREADS" --workers "$WORKERS" --layers layer12,layer18 2>"$WORK/pt.log") || { cat "$WORK/pt.log" >&2; exit 1; }
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
BATCHLOG=$(grep -o 'msg="batch size measured".*' "$WORK/ff.log" | sed 's/msg="batch size measured" //' | tr '\n' ';' || true)

"$PY" - "$FF" "$PT" <<'PYEOF' > "$WORK/table.md"
import json, sys
ff = {r["layer"]: r for r in json.loads(sys.argv[1])}
pt = {r["layer"]: r for r in json.loads(sys.argv[2])}
print("| layer | featurefs images/s | PyTorch eager images/s | **ratio featurefs / PyTorch** | featurefs batch | featurefs decode+preprocess s (summed over workers) | featurefs inference s | decode share of featurefs work | PyTorch waiting for data s | PyTorch model s |")
print("|---|---|---|---|---|---|---|---|---|---|")
for layer in ff:
    f, p = ff[layer], pt[layer]
    share = f["decode_seconds"] / (f["decode_seconds"] + f["infer_seconds"])
    print(f"| {layer} | {f['images_per_s']:.2f} | {p['images_per_s']:.2f} | **{f['images_per_s'] / p['images_per_s']:.2f}x** | {f['batch']} "
          f"| {f['decode_seconds']:.2f} | {f['infer_seconds']:.2f} | {100 * share:.0f}% | {p['wait_seconds']:.2f} | {p['infer_seconds']:.2f} |")
PYEOF

cat <<MD
## Feature extraction on the CPU (ResNet-50 layer12 and layer18)

\`scripts/bench-extract.sh\` ($N generated 500x375 quality-90 JPEGs; ResNet-50 with random seeded weights
exported at opset 17; $(nproc) CPUs, ONNX Runtime intra-op threads = torch threads = $THREADS;
PyTorch: torchvision 0.14 eager, PIL decode + transforms in a DataLoader with $WORKERS workers, batch 16;
featurefs: \`Service.Extract\` for every image at once, Go decode/preprocess workers overlapped with
batched ONNX Runtime, batch size measured on first use; session creation and the measurement are
excluded by a warm-up request, as PyTorch gets one warm-up forward; load average $LOAD0 before, $LOAD1 after)

$(cat "$WORK/table.md")

Decode share = decode+preprocess seconds / (decode+preprocess + inference seconds) of featurefs's own
work; decoding runs on the worker pool while inference runs, so wall time is close to inference alone.
Batch-size measurement: ${BATCHLOG:-n/a}
MD
