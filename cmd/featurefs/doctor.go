package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/mountopts"
)

const doctorUsage = `Usage: featurefs doctor [--ort-lib PATH] [--cuda-lib-dir DIRS] [--json]

Says what featurefs can run on here: the ONNX Runtime library (version,
path, the execution providers next to it), the GPUs NVML sees (name,
memory, driver and CUDA version, and whether --device auto uses each or
why not), each CUDA library the GPU needs, found or missing with its path,
nvJPEG's version (--decode gpu) or what is missing, and what --device auto
chooses (it loads the CUDA libraries and runs a probe session on each GPU,
as a mount does; on a host with several usable GPUs it uses all of them).
Exit code 0 whatever it finds; 2 bad usage.

Flags:
`

// runDoctor implements "featurefs doctor".
func runDoctor(args []string) int {
	return doctor(args, os.Stdout, os.Stderr)
}

func doctor(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("featurefs doctor", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.Usage = func() { fmt.Fprint(stderr, doctorUsage); fl.PrintDefaults() }
	rt := extractorFlags(fl, mountopts.Doctor)
	nvmlLib := fl.String("nvml-lib", "", "NVML library (default libnvidia-ml.so.1 from the loader's paths)")
	asJSON := fl.Bool("json", false, "print the report as JSON")
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fl.NArg() != 0 {
		fmt.Fprintf(stderr, "featurefs doctor: unexpected argument %q\n\n", fl.Arg(0))
		fl.Usage()
		return exitUsage
	}
	d := extractor.Diagnose(extractor.DiagnoseConfig{ORTLib: rt.ORTLib, CUDALibDir: rt.CUDALibDir, NVMLLib: *nvmlLib})
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(d); err != nil {
			fmt.Fprintf(stderr, "featurefs doctor: %v\n", err)
			return exitOther
		}
		return exitOK
	}
	printDiagnosis(stdout, d)
	return exitOK
}

// printDiagnosis writes d as text, one section per part.
func printDiagnosis(w io.Writer, d extractor.Diagnosis) {
	fmt.Fprintln(w, "ONNX Runtime")
	fmt.Fprintf(w, "  library    %s\n", d.ORT.Path)
	switch {
	case d.ORT.Version != "":
		fmt.Fprintf(w, "  version    %s (featurefs is built for %s)\n", d.ORT.Version, extractor.ORTVersion)
	default:
		fmt.Fprintln(w, "  version    unknown")
	}
	if d.ORTError != "" {
		fmt.Fprintf(w, "  problem    %s\n", d.ORTError)
	}
	fmt.Fprintln(w, "  providers  CPU: built in")
	for _, p := range d.ORT.Providers {
		state := "present"
		if !p.Present {
			state = "missing"
			if p.Name == "CUDA" || p.Name == "TensorRT" {
				state += " (scripts/install-deps.sh --gpu installs it)"
			}
		}
		fmt.Fprintf(w, "             %s: %s %s\n", p.Name, p.File, state)
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "GPUs (NVML)")
	switch {
	case d.NVMLError != "":
		fmt.Fprintf(w, "  no GPU: %s\n", d.NVMLError)
	case len(d.GPUs) == 0:
		fmt.Fprintln(w, "  no GPU: NVML lists none")
	default:
		fmt.Fprintf(w, "  driver %s, CUDA %s\n", orNA(d.Driver), orNA(d.CUDA))
		for _, g := range d.GPUs {
			dev := fmt.Sprintf("cuda:%d", g.Index)
			fmt.Fprintf(w, "  %s  %s  %s total, %s free, compute capability %s\n", dev, g.Name,
				mountopts.FormatSize(int64(g.TotalBytes)), mountopts.FormatSize(int64(g.FreeBytes)), orNA(g.Capability))
			pad := strings.Repeat(" ", len(dev)+4)
			switch {
			case g.Used:
				fmt.Fprintf(w, "%sused by --device auto\n", pad)
			case g.NotUsed == "" || strings.Contains(d.AutoWhy, g.NotUsed):
				fmt.Fprintf(w, "%snot used: see --device auto below\n", pad)
			default:
				fmt.Fprintf(w, "%snot used: %s\n", pad, g.NotUsed)
			}
		}
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "CUDA libraries (found without LD_LIBRARY_PATH; the first directory that has one wins)")
	width := 0
	for _, l := range d.CUDALibs {
		width = max(width, len(l.Name))
	}
	for _, l := range d.CUDALibs {
		need := "needed"
		switch {
		case l.TensorRT:
			need = "for --tensorrt"
		case !l.Required:
			need = "optional"
		}
		where := l.Path
		if where == "" {
			where = "missing"
		}
		fmt.Fprintf(w, "  %-*s  %s  (%s, %s)\n", width, l.Name, where, l.What, need)
	}
	switch nv := d.NVJPEG; {
	case nv.Missing != "":
		fmt.Fprintf(w, "  nvJPEG: %s: --decode gpu decodes on the CPU\n", nv.Missing)
	case nv.Error != "":
		fmt.Fprintf(w, "  nvJPEG: %s: --decode gpu decodes on the CPU\n", strings.TrimPrefix(nv.Error, "nvJPEG: "))
	default:
		fmt.Fprintf(w, "  nvJPEG %s loads (%s): --decode gpu can use it\n", nv.Version, nv.Path)
	}
	fmt.Fprintf(w, "  --decode auto: %s (%s)\n", d.DecodeAuto, d.DecodeAutoWhy)
	fmt.Fprintf(w, "  searched %d directories:\n", len(d.SearchDirs))
	for _, dir := range d.SearchDirs {
		fmt.Fprintf(w, "    %s\n", dir)
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "--device auto")
	if d.Auto == "cpu" {
		fmt.Fprintf(w, "  runs on the CPU: %s\n", strings.TrimSuffix(d.AutoWhy, "; running on the CPU"))
	} else {
		fmt.Fprintf(w, "  runs on %s: %s\n", d.Auto, d.AutoWhy)
	}
}

func orNA(s string) string {
	if s == "" {
		return "n/a"
	}
	return s
}
