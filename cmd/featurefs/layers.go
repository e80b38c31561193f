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

Prints the model's layers (block boundaries): index, directory name, ONNX
tensor, per-sample shape, bytes per sample (float32) and cumulative GFLOPs.
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
		fmt.Fprint(os.Stderr, layersUsage)
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
