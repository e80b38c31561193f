// Command featurefs mounts an object bucket as a read-only filesystem of DNN
// feature views. See README.md for the quick start.
package main

import (
	"fmt"
	"os"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `featurefs: an object bucket as a read-only filesystem of DNN features

Usage:
  featurefs mount [flags] SOURCE MOUNTPOINT   SOURCE = s3://BUCKET[/PREFIX] | DIR
  featurefs mount --remote URL[,URL...] [flags] MOUNTPOINT
                                              mount feature servers (featurefs serve; docs/SERVE.md)
  featurefs layers MODEL.onnx                 print a model's layer table
  featurefs extract --model M.onnx --layer K IMAGE|DIR... -o DIR   (or --files-from FILE|-)
  featurefs cache stats|clear --cache-dir DIR
  featurefs stats [--json] MOUNTPOINT         live figures of a mount
  featurefs warm PATH                         extract everything under a feature directory, with progress
  featurefs warm --source SOURCE --model NAME=M.onnx --layer LAYER [PREFIX]
                                              the same without a mount: into --cache-dir (and --feature-store)
  featurefs warm --source SOURCE --model NAME=M.onnx --predictions OUT.jsonl [PREFIX]
                                              top classes of every image, one JSON line each (resumable)
  featurefs diff-predictions A.jsonl B.jsonl  images whose top-1 class changed between two predictions files
  featurefs serve [flags] SOURCE              near-data feature server (docs/SERVE.md)
  featurefs doctor [--json]                   ONNX Runtime, GPUs, CUDA libraries: what --device auto runs on
  featurefs bench --model M.onnx [flags] DIR  extraction throughput on the images in DIR (JSON)
  featurefs version

Run 'featurefs COMMAND -h' for a command's flags.
`

func main() {
	moreProcs()
	os.Exit(run(os.Args[1:]))
}

// run dispatches to a subcommand and returns the process exit code.
func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "mount":
		privateUmask()
		return runMount(rest)
	case "layers":
		return runLayers(rest)
	case "extract":
		return runExtract(rest)
	case "cache":
		privateUmask()
		return runCache(rest)
	case "warm":
		privateUmask()
		return runWarm(rest)
	case "stats":
		return runStats(rest)
	case "diff-predictions":
		return runDiffPredictions(rest)
	case "serve":
		privateUmask()
		return runServe(rest)
	case "doctor":
		return runDoctor(rest)
	case "bench":
		return runBench(rest)
	case "version", "--version", "-v":
		fmt.Println("featurefs", version)
		return 0
	case "help", "-h", "--help":
		fmt.Print(usage)
		return 0
	}
	fmt.Fprintf(os.Stderr, "featurefs: unknown command %q\n\n%s", cmd, usage)
	return 2
}
