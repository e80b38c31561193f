package main

import (
	"flag"
	"strings"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/mountopts"
)

// extractorFlags binds the option table's flags of command c, one that
// runs an extractor without a mount (extract and bench: --device,
// --precision, --tensorrt, --ort-lib, --cuda-lib-dir, --batch-size, and
// extract's --dtype, --allow-cpu-fallback, --fast-decode; layers and
// doctor: --ort-lib, and doctor --cuda-lib-dir), over options with the
// table's defaults.
func extractorFlags(fl *flag.FlagSet, c mountopts.Command) *mountopts.Options {
	o := mountopts.Default()
	bindOptions(fl, &o, c)
	return &o
}

// checkExtractor says what is wrong with extract's or bench's extractor
// flags, in one line, or nil. They also take --device gpu, which the
// extractor reads as cuda.
func checkExtractor(o *mountopts.Options) error {
	if strings.EqualFold(strings.TrimSpace(o.Device), "gpu") {
		c := *o
		c.Device = "cuda"
		return c.ValidateExtractor()
	}
	return o.ValidateExtractor()
}

// applyExtractor sets the extractor flags' values in cfg.
func applyExtractor(o *mountopts.Options, cfg *extractor.Config) {
	cfg.ORTLib, cfg.Device, cfg.TensorRT = o.ORTLib, o.Device, o.TensorRT
	cfg.Precision, cfg.CUDALibDir = o.Precision, o.CUDALibDir
	cfg.Decode = extractor.DecodeMode(o.Decode)
}
