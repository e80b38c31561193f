#!/usr/bin/env bash
# Benchmark (make bench): CPU extraction throughput of ResNet-50 layer12 and
# layer18 on the same set of 500x375 JPEGs, in interleaved rounds
# (scripts/bench_extract.py): featurefs's extractor in several
# configurations of ONNX Runtime intra-op threads x decode workers, bare
# ONNX Runtime on random input at the same batch size and threads (the
# ceiling), decode and preprocess alone, and PyTorch eager (torchvision +
# PIL, DataLoader with workers, same thread count); with each stage's CPU
# time per image. Prints one markdown section on stdout.
#
#   scripts/bench-extract.sh      (after make build)
# Env: BENCH_IMAGES (64): number of JPEGs; BENCH_WORKERS (2): DataLoader
#      workers; BENCH_ROUNDS (3); BENCH_CONFIGS (default,2x1,1x2,1x1:
#      THREADSxWORKERS, "default" is what a mount runs).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
N=${BENCH_IMAGES:-64}
WORKERS=${BENCH_WORKERS:-2}
WORK=$(mktemp -d /tmp/featurefs-bench-extract.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
need_bin
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

CONFIGS=${BENCH_CONFIGS:-default,2x1,1x2,1x1}
"$PY" "$REPO/scripts/bench_extract.py" --bin "$BIN" --model "$MODEL" --images "$WORK/img" \
  --rounds "${BENCH_ROUNDS:-3}" --configs "${CONFIGS//default/0x0}" --torch-workers "$WORKERS" --command "make bench"
