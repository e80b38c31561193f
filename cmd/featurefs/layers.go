package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/mountopts"
)

const layersUsage = `Usage: featurefs layers [--ort-lib PATH] MODEL.onnx

Prints a line naming the model (its sha256, input and shape), then its
layers (block boundaries), one a row, in these columns:

  index         the layer's index K
  name          its directory name under a mount (layerK)
  tensor        the ONNX tensor it reads
  shape         per-sample shape
  bytes/sample  bytes per sample (float32)
  cum GFLOPs    cumulative GFLOPs per sample
  digest        the first 12 hex digits of the layer's digest, "-" where
                there is none (docs/MODELS.md, "Layer digests")
  aliases       its other names (a model's aliases in the config file:
                features/MODEL/ALIAS/...), comma-separated

Flags:
`

// runLayers implements "featurefs layers MODEL.onnx".
func runLayers(args []string) int {
	fl := flag.NewFlagSet("featurefs layers", flag.ContinueOnError)
	fl.Usage = func() { fmt.Fprint(fl.Output(), layersUsage); fl.PrintDefaults() }
	rt := extractorFlags(fl, mountopts.Layers)
	pos, err := parseInterspersed(fl, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if len(pos) != 1 {
		fmt.Fprintf(os.Stderr, "featurefs layers: want one MODEL.onnx argument, got %d\n", len(pos))
		fl.SetOutput(os.Stderr)
		fl.Usage()
		return 2
	}
	path := pos[0]
	cfg := extractor.DefaultConfig()
	cfg.ORTLib = rt.ORTLib
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	table, err := extractor.LayersTable(name, path, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "featurefs layers: %v\n", err)
		return 1
	}
	fmt.Print(table)
	return 0
}
