package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/extractor/spec"
)

// runtimeFlags are the ONNX Runtime and device flags of the commands that
// run an extractor without a mount (extract, bench); mount and serve bind
// theirs through mountopts.
type runtimeFlags struct {
	device, precision, ortLib, cudaLibDir *string
	tensorRT                              *bool
}

// bindRuntimeFlags binds --device, --precision, --tensorrt, --ort-lib and
// --cuda-lib-dir on fl, with def's defaults.
func bindRuntimeFlags(fl *flag.FlagSet, def extractor.Config) runtimeFlags {
	return runtimeFlags{
		device:     fl.String("device", def.Device, "auto (every usable GPU, else the CPU), cpu, cuda (every usable GPU, or fail) or cuda:N,M,... (those GPUs)"),
		precision:  fl.String("precision", string(extractor.FP32), "GPU arithmetic: fp32, tf32 (TF32 tensor cores) or fp16 (with --tensorrt)"),
		tensorRT:   fl.Bool("tensorrt", false, "use ONNX Runtime's TensorRT provider on a GPU"),
		ortLib:     fl.String("ort-lib", def.ORTLib, "libonnxruntime shared library (or $FEATUREFS_ORT_LIB)"),
		cudaLibDir: fl.String("cuda-lib-dir", "", "`directories` (colon-separated) searched first for the CUDA and cuDNN libraries (or FEATUREFS_CUDA_LIB_DIR)"),
	}
}

// check says what is wrong with the flags' values, in one line, or nil.
func (r runtimeFlags) check() error {
	if _, _, err := spec.ParseDevice(*r.device); err != nil && !strings.EqualFold(strings.TrimSpace(*r.device), "gpu") {
		return fmt.Errorf("--device %q: %w", *r.device, err)
	}
	switch p := extractor.Precision(*r.precision); {
	case p != extractor.FP32 && p != extractor.TF32 && p != extractor.FP16:
		return fmt.Errorf("--precision %q: want fp32, tf32 or fp16", *r.precision)
	case p == extractor.FP16 && !*r.tensorRT:
		return fmt.Errorf("--precision fp16 needs --tensorrt (the CUDA provider runs fp32 or tf32)")
	}
	return nil
}

// apply sets the flags' values in cfg.
func (r runtimeFlags) apply(cfg *extractor.Config) {
	cfg.ORTLib, cfg.Device, cfg.TensorRT = *r.ortLib, *r.device, *r.tensorRT
	cfg.Precision, cfg.CUDALibDir = extractor.Precision(*r.precision), *r.cudaLibDir
}
