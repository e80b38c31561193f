#!/usr/bin/env bash
# measures: go.mod cmd extractor scripts/benchextract
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
bench_work bench-extract
need_bin
MODEL=$(model_path resnet50)

gen_extract_jpegs "$WORK/img" "$N"

CONFIGS=${BENCH_CONFIGS:-default,2x1,1x2,1x1}
"$PY" "$REPO/scripts/bench_extract.py" --bin "$BIN" --model "$MODEL" --images "$WORK/img" \
  --rounds "${BENCH_ROUNDS:-3}" --configs "${CONFIGS//default/0x0}" --torch-workers "$WORKERS"
