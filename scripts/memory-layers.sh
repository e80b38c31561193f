#!/bin/bash
# measures: go.mod cmd fs extractor cache
# Benchmark (issue 49): a mount with --memory-limit 512MiB warming five
# ResNet-50 layers in turn (layer12, 15, 16, 17, 18: more sessions than the
# limit holds), twice, through `featurefs warm --jobs 8`, on 24 generated
# JPEGs; prints the mount's peak resident set (VmHWM), its sessions open
# at the end, created, closed for memory and their bytes (stats).
#
#   scripts/memory-layers.sh BIN LABEL   (as root: it mounts;
#   scripts/bench-memory.sh runs it for its second section, and two builds
#   in turn make an A/B, as docs/records/memory.md records)
set -euo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)
bin=$(realpath "$1"); label=$2
work=${BENCH_WORK:-/tmp/featurefs-bench-memory-layers}
mkdir -p "$work"; cd "$work"
[ -d data ] || /usr/bin/python3 "$scripts/gen_dataset.py" --out data --classes 2 --train 12 --val 0 --formats jpg >/dev/null 2>&1
rm -rf cache mnt; mkdir -p cache mnt
model=$(ls "$HOME"/.cache/featurefs/models/resnet50-*.onnx 2>/dev/null | head -1)
[ -n "$model" ] || { echo "no ResNet-50 in ~/.cache/featurefs/models: go test ./test -run TestMemoryLimit exports one" >&2; exit 1; }
"$bin" mount --foreground --device cpu --memory-limit 512MiB --log-level debug --model resnet50=$model --cache-dir cache data mnt 2>log.$label &
pid=$!
until "$bin" stats mnt >/dev/null 2>&1; do sleep 0.2; done
for e in 1 2; do for l in layer12 layer15 layer16 layer17 layer18; do "$bin" warm --jobs 8 mnt/features/resnet50/$l >/dev/null; done; done
hwm=$(awk '/VmHWM/{print int($2/1024)}' /proc/$pid/status)
"$bin" stats --json mnt > stats.$label.json
umount mnt; wait $pid
/usr/bin/python3 -c "
import json,sys
s=json.load(open('stats.$label.json'))
m=s['memory']; x=s.get('extraction',{})
print('$label', 'VmHWM_MiB', $hwm, 'sessions', s['extractor']['sessions'] if 'extractor' in s else '?', 'created', s.get('extractor',{}).get('sessions_created'), 'closed_for_memory', m.get('sessions_closed_for_memory'), 'session_MiB', m.get('session_bytes',0)>>20)
"
