# featurefs: build, demo, tests and benchmarks.
#
#   make demo    install dependencies, build, mount a generated image folder
#                through a random-weight ResNet-50 and train heads on its plain
#                and augmented (--augment 4) features, timing each epoch
#   make image   the container image, bin/featurefs-image.tar (an OCI image
#                layout named featurefs:latest; docs/KUBERNETES.md)
#   make test    install dependencies, build, vet, fuzz briefly and run every
#                test (unit tests with -race, kernel-mount integration tests)
#   make bench   run every scripts/bench-*.sh and write docs/BENCHMARKS.md
#   make bench-docs  rewrite docs/BENCHMARKS.md from docs/bench/*.md (runs nothing)
#   make gpu-check   on a GPU host: fidelity and throughput on the GPU against
#                PyTorch, and --decode gpu's decode fidelity and throughput
#                (docs/GPU.md); writes docs/bench/gpu.md; not in make test
#
# Dependencies (apt packages, libonnxruntime, MinIO, Go modules) are installed
# by scripts/install-deps.sh into $(DEPS); the targets need root on Debian 12.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

DEPS ?= $(or $(FEATUREFS_DEPS),$(HOME)/.cache/featurefs)
export FEATUREFS_DEPS := $(DEPS)
# A Go toolchain that install-deps.sh fetched (only when none was on PATH).
export PATH := $(DEPS)/go/bin:$(PATH)
export FEATUREFS_ORT_LIB ?= $(DEPS)/lib/onnxruntime-1.29.0/libonnxruntime.so.1
export CGO_ENABLED := 1

GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
BIN := bin/featurefs
# Each fuzz target runs this long in `make test`.
FUZZTIME ?= 15s
# The whole test run (integration tests included) must end well inside CI's 90 minutes.
TEST_TIMEOUT ?= 45m

.PHONY: all build deps demo image test check fuzz unit soak bench bench-docs gpu-check clean

all: build

deps:
	bash scripts/install-deps.sh

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/featurefs

demo: deps build
	bash scripts/demo.sh

# image: featurefs's container image, built offline (scripts/mkimage): an OCI
# image layout archive, bin/featurefs-image.tar, named featurefs:latest
# (podman load -i / docker load -i; docs/KUBERNETES.md). Reproducible: the
# same commit gives the same bytes from any checkout path
# (test/image_paths_test.go). Its binary, IMAGE_BIN, is built apart from
# bin/featurefs with -trimpath (no path of the checkout or of the Go module
# cache in it) and -buildvcs=false (no VCS stamp: `featurefs version`, from
# git describe through -ldflags, names the commit, and a checkout git will
# not read, another user's, still builds). SOURCE_DATE_EPOCH fixes the
# image's times; when not set, it is the commit's time (git log -1
# --format=%ct), 0 outside a git checkout.
IMAGE_BIN := bin/featurefs-image-bin
IMAGE_EPOCH = $(or $(SOURCE_DATE_EPOCH),$(shell git log -1 --format=%ct 2>/dev/null),0)
image:
	$(GO) build -trimpath -buildvcs=false -ldflags '$(LDFLAGS)' -o $(IMAGE_BIN) ./cmd/featurefs
	SOURCE_DATE_EPOCH=$(IMAGE_EPOCH) $(GO) run ./scripts/mkimage -bin $(IMAGE_BIN) -ort "$(FEATUREFS_ORT_LIB)" -o bin/featurefs-image.tar

# check: formatting and vet.
check:
	@unformatted=$$(gofmt -l $$($(GO) list -f '{{.Dir}}' ./...)); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

# fuzz: every Fuzz target in the module, FUZZTIME each. Go 1.26's fuzzing
# coordinator can fail a target with a bare "context deadline exceeded" when
# -fuzztime ends while a worker is mid-call (golang/go#75804, fixed in Go
# 1.27): such a run, with no failing input written, is run again, up to 3
# times in all (a fresh-clone CI run on 2 CPUs hit it twice in a row on
# FuzzModelsAnswer); any other failure fails at once.
fuzz:
	@log=$$(mktemp); trap 'rm -f "$$log"' EXIT; \
	for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' "$$pkg" | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$f ($(FUZZTIME))"; \
	    for try in 1 2 3; do \
	      if $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) "$$pkg" >"$$log" 2>&1; then break; fi; \
	      if [ $$try != 3 ] && grep -q 'context deadline exceeded' "$$log" && ! grep -q 'Failing input written' "$$log"; then \
	        echo "fuzz $$f: the fuzzing coordinator's deadline race (golang/go#75804), no failing input: again"; continue; fi; \
	      cat "$$log"; exit 1; \
	    done; \
	  done; \
	done

# unit: every package's tests, with the race detector, integration tests
# (package test: MinIO, kernel mounts, PyTorch loaders) included. The model
# tests of extractor/graph parse and prune five exported torchvision models
# (VGG-16's 528 MB once per layer): 16x slower under the race detector (34
# min vs 2 on a loaded 2-core machine), for code that runs on one goroutine,
# so that package's concurrent test runs with -race and the rest without.
GRAPH_RACE_TESTS = ^TestConcurrentUse$$
unit: build
	FEATUREFS_BIN=$(CURDIR)/$(BIN) $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) \
	  $$($(GO) list ./... | grep -v '/extractor/graph$$')
	$(GO) test -race -count=1 -run '$(GRAPH_RACE_TESTS)' ./extractor/graph
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./extractor/graph

test: deps build check fuzz unit

# bench: run every scripts/bench-*.sh through the harness (scripts/bench.sh:
# each prints one markdown section, kept with its stamp in docs/bench/AREA.md);
# then docs/BENCHMARKS.md is written from them. One area:
# scripts/bench.sh AREA, then make bench-docs.
bench: deps build
	@bash scripts/bench.sh
	@bash -c "$$BENCH_DOC_SH" bench-doc bench docs/bench/*.md

# gpu-check: scripts/gpu-check.sh on a GPU host (docs/GPU.md): needs only
# bin/featurefs, ONNX Runtime with its GPU providers and the host's python
# with torch on CUDA, no network (so no deps here). Exits 1 with one line
# where there is no usable GPU. On success its markdown section becomes
# docs/bench/gpu.md (make bench-docs then puts it in docs/BENCHMARKS.md).
gpu-check:
	@[ "$${GPU_CHECK_REHEARSAL:-0}" != 1 ] || { echo "make gpu-check: a rehearsal is no GPU figure: run scripts/gpu-check.sh for it" >&2; exit 2; }
	@if command -v $(GO) >/dev/null 2>&1; then $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/featurefs; \
	elif [ ! -x $(BIN) ]; then echo "make gpu-check: no Go here to build $(BIN): copy a built featurefs there" >&2; exit 1; fi
	@mkdir -p docs/bench; tmp=$$(mktemp); \
	bash scripts/gpu-check.sh >"$$tmp" || { rm -f "$$tmp"; exit 1; }; \
	mv "$$tmp" docs/bench/gpu.md; chmod 644 docs/bench/gpu.md; cat docs/bench/gpu.md; \
	echo "wrote docs/bench/gpu.md (make bench-docs adds it to docs/BENCHMARKS.md)" >&2

# bench-docs: rewrite docs/BENCHMARKS.md from the sections already in
# docs/bench/*.md, running nothing.
bench-docs:
	@bash -c "$$BENCH_DOC_SH" bench-doc bench-docs docs/bench/*.md

# BENCH_DOC_SH writes docs/BENCHMARKS.md (bench, bench-docs): arguments: the
# make target, then the section files. A header, a summary of the targets with
# the figures read from the sections, then the sections in order.
bench bench-docs: export BENCH_DOC_SH = $(value _bench_doc_sh)
define _bench_doc_sh
set -euo pipefail
target=$1; shift
rev=$(git describe --always --dirty 2>/dev/null || echo unknown)
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'; }
verdict() { if ge "$1" "$2"; then echo met; else echo MISSED; fi; }
# row TARGET MEASURED VERDICT AREA: rows without a target go after the others.
row() {
  local r="| $1 | $2 | $3 | [$4](bench/$4.md)${stale[$4]:+ (stale)} |"
  case $3 in "no target"*) others+=("$r") ;; *) targets+=("$r") ;; esac
}
summary() {
  echo "## Summary: targets"
  echo
  echo "Each target with the figure of the latest run of its section: the median of that run's interleaved rounds (the"
  echo "section says where it ran, how many rounds and how loaded the machine was); verdicts are computed from those figures."
  echo
  local f area n why=() targets=() others=()
  for f in "$@"; do
    area=$(basename "$f" .md); n=0
    case $area in
    extract)
      while read -r layer ro rp; do
        row "feature extraction, featurefs vs bare ONNX Runtime on the CPU (ResNet-50 $layer)" "${ro}x" ">= 0.85x: $(verdict "$ro" 0.85)" "$area"
        row "feature extraction, featurefs vs PyTorch eager on the CPU (ResNet-50 $layer)" "${rp}x" ">= 2x: $(verdict "$rp" 2)" "$area"; n=$((n + 2))
      done < <(sed -nE 's/^- (layer[0-9]+): featurefs \(default\) \*\*([0-9.]+)x bare ONNX Runtime\*\* .*\*\*([0-9.]+)x PyTorch eager\*\*.*/\1 \2 \3/p' "$f") ;;
    cache)
      while read -r t r; do
        row "warm feature-cache reads vs the same bytes in local files" "$r" ">= $t: $(verdict "$r" "$t")" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| \*\*read ratio cache \/ files\*\* \(target >= ([0-9.]+);.*\| \*\*([0-9.]+)\*\* \|$/\1 \2/p' "$f")
      while read -r w p pt g gt; do
        row "the cache alone: CPU of a Put of an 803 KB feature vs \`os.WriteFile\`, $w writer(s)" "${p}x" "<= ${pt}x: $(verdict "$pt" "$p")" "$area"
        row "the cache alone: CPU of a Get of an 803 KB feature vs \`os.ReadFile\`, $w writer(s)" "${g}x" "<= ${gt}x: $(verdict "$gt" "$g")" "$area"; n=$((n + 2))
      done < <(sed -nE 's/^- cache \(default\) at ([0-9]+) writer\(s\): Put \*\*([0-9.]+)x\*\* [^(]*\(target <= ([0-9.]+)x: [A-Za-z]+\), Get \*\*([0-9.]+)x\*\* [^(]*\(target <= ([0-9.]+)x: [A-Za-z]+\).*/\1 \2 \3 \4 \5/p' "$f") ;;
    mount)
      while read -r r t; do
        row "second-epoch DataLoader throughput, mount vs local .npy files" "${r}x" ">= ${t}x: $(verdict "$r" "$t")" "$area"; n=$((n + 1))
      done < <(sed -nE 's/.*\*\*([0-9.]+)x local\*\* \(target >= ([0-9.]+)x\).*/\1 \2/p' "$f")
      while read -r r t; do
        row "\`ls -l\` of a large directory, mount vs the local source directory" "${r}x" "<= ${t}x: $(verdict "$t" "$r")" "$area"; n=$((n + 1))
      done < <(sed -nE 's/.*\*\*([0-9.]+)x local\*\* \(target <= ([0-9.]+)x\).*/\1 \2/p' "$f") ;;
    epoch)
      while IFS='|' read -r name r t; do
        row "transfer learning: $name" "${r}x" ">= ${t}x: $(verdict "$r" "$t") (median of the section's per-round ratios)" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| ([^|]+) \| \*\*([0-9.]+)x\*\* \(target >= ([0-9.]+)x: (met|MISSED)\).*/\1|\2|\3/p' "$f") ;;
    augment)
      while IFS='|' read -r name r t v; do
        [ "$v" = met ] || v=MISSED
        row "augmented views: $name" "$r" "$t in every round: $v" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| (first pass over [0-9]+ views: extractions [^|]*[^ |]|extractions after a remount[^|]*[^ |]) \| \*\*([0-9.]+)\*\* \(target ([0-9.]+): (met|MISSED)\).*/\1|\2|\3|\4/p' "$f")
      while IFS='|' read -r name r t; do
        row "augmented views: $name" "${r}x" ">= ${t}x: $(verdict "$r" "$t") (median of the section's per-round ratios)" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| (epoch over a cached view tree [^|]*[^ |]) \| \*\*([0-9.]+)x\*\* \(target >= ([0-9.]+)x: (met|MISSED)\).*/\1|\2|\3/p' "$f")
      while IFS='|' read -r name r; do
        row "augmented views: $name" "${r}x" "no target" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| (first pass, seconds per view-image [^|]*[^ |]) \| \*\*([0-9.]+)x\*\* \(no target\).*/\1|\2/p' "$f") ;;
    delivery)
      while read -r t r; do
        row "delivery, near-free model: the mount process's CPU per image vs the extractor's" "${r}x" "<= ${t}x: $(verdict "$t" "$r")" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| the mount process.s CPU per image <= ([0-9.]+)x the extractor.s \| \*\*([0-9.]+)x\*\*.*/\1 \2/p' "$f")
      while read -r t r; do
        row "delivery, near-free model: epoch 1 through the mount vs PyTorch, images/s" "${r}x" ">= ${t}x: $(verdict "$r" "$t")" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| epoch 1 through the mount >= ([0-9.]+)x PyTorch.s images\/s \| \*\*([0-9.]+)x\*\*.*/\1 \2/p' "$f") ;;
    featurestore)
      while IFS='|' read -r name r t; do
        row "feature store: $name" "${r}x" ">= ${t}x: $(verdict "$r" "$t") (median of the section's per-round ratios)" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| ([^|]+) \| \*\*([0-9.]+)x\*\* \(target >= ([0-9.]+)x: (met|MISSED)\).*/\1|\2|\3/p' "$f") ;;
    split)
      while IFS='|' read -r within pct t v; do
        [ "$v" = met ] || v=MISSED
        row "split (two-host test bed): \`--split auto\` within 5% of the best fixed split" "$within ($pct%)" ">= $t% of configurations: $v" "$area"; n=$((n + 1))
      done < <(sed -nE 's/.*auto within 5% of the best fixed split: ([0-9]+ of [0-9]+ configurations) \(([0-9]+)%; target ([0-9]+)%: ([A-Za-z ]+)\).*/\1|\2|\3|\4/p' "$f")
      while IFS='|' read -r r t v; do
        [ "$v" = met ] || v=MISSED
        row "split (two-host test bed): \`--split auto\`'s worst ratio to the best fixed split" "$r" ">= $t: $v" "$area"; n=$((n + 1))
      done < <(sed -nE "s/.*auto's worst ratio to the best fixed split: ([0-9.]+) \(target >= ([0-9.]+): ([A-Za-z ]+)\).*/\1|\2|\3/p" "$f")
      while IFS='|' read -r ch back v; do
        [ "$v" = met ] || v=MISSED
        row "split: \`--split auto\` back within 10% of the best fixed split after the link changes $ch" "$back" "<= 30 s: $v" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| ([0-9]+ -> [0-9]+ Mbit\/s) \|[^|]*\|[^|]*\|[^|]*\|[^|]*\| ([^|]*[^ |]) \| (met|NOT met) \|$/\1|\2|\3/p' "$f") ;;
    codec)
      while read -r r t; do
        row "ResNet-50 layer12 float32 features in the cache, raw vs stored (\`--cache-compression s2\`)" "${r}x" ">= ${t}x: $(verdict "$r" "$t")" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^- ResNet-50 layer12 float32 in the cache \(s2\): \*\*([0-9.]+)x\*\* smaller \(target >= ([0-9.]+)x\)\./\1 \2/p' "$f") ;;
    wire)
      while read -r r t; do
        row "remote layer12 features at 50 Mbit/s, \`--wire-compression s2\` vs off" "${r}x" ">= ${t}x: $(verdict "$r" "$t")" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| 50 Mbit\/s \|.*\| \*\*([0-9.]+)x\*\* \(target >= ([0-9.]+)x: .*/\1 \2/p' "$f") ;;
    bucket)
      while read -r r; do
        row "bucket layer overhead: \`bucket.Get\` vs the AWS SDK's GetObject, 1 caller" "$r" "no target (~1.0 expected)" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| \*\*ratio bucket\.Get \/ SDK, 1 caller\*\*.*\| \*\*([0-9.]+)\*\* \|$/\1/p' "$f") ;;
    preprocess)
      while read -r r; do
        row "preprocessing, Go vs PIL + torchvision (one thread each)" "${r}x" "no target" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| \*\*ratio Go \/ PIL\+torchvision\*\* \| \*\*([0-9.]+)\*\* \|$/\1/p' "$f") ;;
    batch)
      while IFS='|' read -r name r; do
        row "near-data batching: features/s batched vs one request per feature ($name)" "${r}x" "no target" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| ([^|(]*[^ (]) \([^|]*\) \| [^|]* \| [^|]* \| \*\*([0-9.]+)x\*\* \|.*/\1|\2/p' "$f") ;;
    memory)
      while IFS='|' read -r l r hi v; do
        row "memory: peak RSS (VmHWM) of a mount reading two ResNet-50 layers, \`--memory-limit $l\` (highest round $hi MiB)" "$r MiB" "<= $l: $v" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^- Target: peak RSS \(VmHWM\) <= ([0-9]+[KMG]iB) under `--memory-limit [^`]*` \(new\): median ([0-9]+) MiB, the highest round ([0-9]+): \*\*([a-z]+)\*\*\.$/\1|\2|\3|\4/p' "$f") ;;
    autocompress)
      while IFS='|' read -r r v; do
        row "\`--cache-compression auto\` vs \`off\`, epoch 1 images/s (near-free model; median of per-round ratios)" "${r}x" ">= 0.98x: $v" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^Per round, `auto`.s images\/s over `off`.s: ([0-9.]+) \([^)]*\) \(target >= 0\.98: ([a-z]+)\).*/\1|\2/p' "$f") ;;
    scale)
      while read -r t r; do
        row "scale: DatasetFolder scan through the mount vs the source directory (ImageNet-shaped local source)" "${r}x" "<= ${t}x: $(verdict "$t" "$r")" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| DatasetFolder scan of the mount <= ([0-9.]+)x the source directory.s \| \*\*([0-9.]+)x\*\*.*/\1 \2/p' "$f")
      while IFS='|' read -r t r at v; do
        row "scale: mount RSS after the scan and the reads ($at)" "$r MiB" "<= $t MiB at 1M entries: $v" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| mount RSS after the scan and the reads <= ([0-9]+) MiB at 1M entries \| \*\*([0-9]+) MiB\*\* at ([0-9,]+ entries) \| ([^(|]*[^ (|]).*/\1|\2|\3|\4/p' "$f")
      while IFS='|' read -r name r v; do
        row "scale (issue 39): $name" "$r" "$v" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| (RSS after [^|]*[^ |]) \| \*\*([0-9]+)( MiB)?\*\*[^|]* \| ([^|]*[^ |]) \|$/\1|\2 MiB|\4/p' "$f")
      while IFS='|' read -r name r; do
        row "scale, MinIO bucket: $name, mount vs a direct boto3 list" "${r}x" "no target" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| (first full listing \([0-9,]+ objects|`ls -l` of a [0-9,]+-entry directory, first)[^|]* \| [^|]* \| [^|]* \| \*\*([0-9.]+)x\*\*.*/\1|\2/p' "$f" | sed 's/^first full listing (/first full listing of /')
      while read -r t r; do
        row "scale: \`warm\` of images packed one tar per class vs loose objects from MinIO, images/s" "${r}x" ">= ${t}x: $(verdict "$r" "$t")" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| `warm` of the packed set >= ([0-9.]+)x the loose set, images\/s \| \*\*([0-9.]+)x\*\*.*/\1 \2/p' "$f")
      while read -r t r; do
        row "scale: MinIO GETs per sample of the packed set (\`warm\`)" "$r" "<= $t: $(verdict "$t" "$r")" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| GETs per sample of the packed set <= ([0-9.]+) \| \*\*([0-9.]+)\*\*.*/\1 \2/p' "$f")
      while IFS='|' read -r r v; do
        row "scale: features of archive members byte-identical to the loose images'" "$r" "all: $v" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| features byte-identical, packed vs loose [^|]* \| \*\*([0-9]+ of [0-9]+)\*\* identical \| ([A-Za-z]+) \|$/\1|\2/p' "$f") ;;
    archive-index)
      while IFS='|' read -r t name r; do
        row "archive index: first listing of a 100k-member tar vs the same names as plain files ($name)" "${r}x" "<= ${t}x: $(verdict "$t" "$r")" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| first listing of the tar <= ([0-9.]+)x the plain directory.s, ([^|]*[^ |]) \| \*\*([0-9.]+)x\*\*.*/\1|\2|\3/p' "$f")
      while IFS='|' read -r name r v; do
        row "archive index: peak RSS of that listing over the plain one's, within the index kept + 64 MiB ($name)" "+$r MiB" "$v" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| peak RSS of the tar listing <= [^,]*, ([^|]*[^ |]) \| \*\*\+([0-9]+) MiB\*\*[^|]*\| ([A-Za-z ]+) \|$/\1|\2|\3/p' "$f") ;;
    predictions)
      while IFS='|' read -r name r; do
        row "predictions: $name, vs a cold read of the same images' last-layer .npy files" "${r}x" "no target (~1.00x: the same extractions)" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| (cold: `cat predictions[^|]*[^ |]|`featurefs warm --predictions`[^|]*[^ |]) \| [^|]* \| [^|]* \| [^|]* \| ([0-9.]+)x \|$/\1|\2/p' "$f") ;;
    reload)
      while read -r r; do
        row "model reload under reads: the longest read in the reload window vs one batch (a cold layer4 read), worst round" "${r}x" "<= 1.00x: $(verdict 1 "$r")" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| \*\*worst round: longest read in the reload window \/ one batch\*\* \| \*\*([0-9.]+)x\*\*.*/\1/p' "$f")
      while IFS='|' read -r fl mx; do
        row "model reload under reads: failed reads, mixed reads" "$fl, $mx" "0, 0: $([ "$fl/$mx" = 0/0 ] && echo met || echo MISSED)" "$area"; n=$((n + 1))
      done < <(paste -d'|' <(sed -nE 's/^\| failed reads, all rounds \| \*\*([0-9]+)\*\*.*/\1/p' "$f") \
        <(sed -nE 's/^\| reads of other bytes than before the swap \(mixed\), all rounds \| \*\*([0-9]+)\*\*.*/\1/p' "$f")) ;;
    gpu)
      while IFS='|' read -r layer r s; do
        row "GPU extraction, featurefs vs PyTorch on the same GPU (ResNet-50 $layer)" "${r}x" ">= 1.5x: $(verdict "$r" 1.5)" "$area"; n=$((n + 1))
        row "GPU extraction, featurefs vs the lower of the GPU and CPU ceilings ($layer)" "$s%" ">= 80%: $(verdict "$s" 80)" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| (layer[0-9]+) \| [^|]* \| [^|]* \| [^|]* \| \*\*([0-9.]+)x\*\* [^|]* \| [^|]* \| [^|]* \| \*\*([0-9]+)%\*\*.*/\1|\2|\3/p' "$f")
      while IFS='|' read -r layer r; do
        row "GPU, epoch 1 of a DataLoader through a --device cuda mount vs PyTorch end to end (ResNet-50 $layer)" "${r}x" ">= 1.5x: $(verdict "$r" 1.5)" "$area"; n=$((n + 1))
      done < <(sed -nE 's/^\| (layer[0-9]+) \| [^|]* \| [^|]* \| \*\*([0-9.]+)x\*\* \((met|MISSED)\) \|.*/\1|\2/p' "$f") ;;
    esac
    [ $n -gt 0 ] || row "$area" "(no target figure found in the section)" "see the section" "$area"
    mapfile -t -O ${#why[@]} why < <(grep -E '^- .*short of' "$f" || true)
  done
  echo "| target | measured | verdict | section |"
  echo "|---|---|---|---|"
  printf '%s\n' "${targets[@]}" "${others[@]}"
  if [ ${#why[@]} -gt 0 ]; then
    echo; echo "Why, in the sections' own words:"; echo
    printf '%s\n' "${why[@]}"
  fi
  echo
}
# bench_freshness (scripts/lib.sh): "current", "stale: ..." or "no stamp: ...".
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
declare -A stale=()
fresh=()
for f in "$@"; do
  area=$(basename "$f" .md); st=$(bench_freshness "$f")
  case $st in current*) ;; *) stale[$area]=1 ;; esac
  fresh+=("| [$area](bench/$area.md) | $st |")
done
out=$(mktemp)
{ echo "# featurefs benchmarks"; echo
  echo "Generated by \`make $target\` on $(date -u +%Y-%m-%d) ($(nproc) CPUs, $(uname -m)$(command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | sed 's/^/, /')) at $rev."
  echo "Each section names the command that produced it."; echo
  if [ ! -f docs/bench/gpu.md ]; then
    echo "No GPU figures yet: \`make gpu-check\` has not run on a GPU host (none was available while the GPU path was"
    echo "built; it is tested on the CPU with fakes: [GPU.md](GPU.md)). Its section, docs/bench/gpu.md, appears here once it has."
    echo
  fi
  summary "$@"
  echo "## Freshness: where each section was measured"
  echo
  echo "From each section's stamp (written by scripts/bench.sh): its commit, and whether a later commit changed the code"
  echo "it measures; a stale section's figures are those of the code at its commit, not of this tree. ${#stale[@]} of $# are"
  echo "stale (marked so in the summary above); rerun one with \`scripts/bench.sh AREA\` and \`make bench-docs\`."
  echo
  echo "| section | freshness |"
  echo "|---|---|"
  printf '%s\n' "${fresh[@]}"
  echo
  recs=(docs/records/*.md)
  if [ -f "${recs[0]}" ]; then
    echo "Records, not rerun by the harness: same-run A/Bs of named builds and earlier runs of a section's benchmark, each"
    echo "section naming the commits it ran (docs quote them as such):$(for r in "${recs[@]}"; do printf ' [%s](records/%s)' "$(basename "$r" .md)" "$(basename "$r")"; done)."
    echo
  fi
  for f in "$@"; do cat "$f"; echo; done
} >"$out"
mv "$out" docs/BENCHMARKS.md; chmod 644 docs/BENCHMARKS.md
echo "wrote docs/BENCHMARKS.md" >&2
endef

# soak: the reliability tests that take a duration or an iteration count,
# run long (docs/RELIABILITY.md): SOAK_ITER kill -9 iterations of the mount
# and SOAK_DURATION of 16 readers plus find. `make test` runs them short.
SOAK_ITER ?= 20
SOAK_DURATION ?= 5m
soak: build
	FEATUREFS_BIN=$(CURDIR)/$(BIN) FEATUREFS_SOAK_ITER=$(SOAK_ITER) FEATUREFS_SOAK_DURATION=$(SOAK_DURATION) \
	  $(GO) test -count=1 -timeout 90m -v -run '^TestReliability(CrashLoop|Load)$$' ./test/

clean:
	rm -rf bin
