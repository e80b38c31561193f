package main

import (
	"testing"

	"github.com/featurefs/featurefs/extractor"
)

// TestNoGPUDecode: only an explicit --decode gpu that the extractor could
// not give a GPU decoder is a problem (exit 4, or a warning with
// --allow-cpu-fallback), named in the extractor's words without its
// "cpu: " verdict; --decode auto and cpu, and a GPU that decodes, are not.
func TestNoGPUDecode(t *testing.T) {
	onCPU := extractor.Stats{JPEGDecode: "cpu: --decode gpu needs a GPU and inference runs on the CPU"}
	onGPU := extractor.Stats{JPEGDecode: "gpu: nvJPEG 13.0.1 (hardware backend) on cuda:0 (--decode gpu; ...)", GPUDecode: &extractor.GPUDecodeStats{}}
	for _, c := range []struct {
		decode string
		st     extractor.Stats
		want   string
	}{
		{"gpu", onCPU, "--decode gpu needs a GPU and inference runs on the CPU"},
		{"gpu", extractor.Stats{}, "--decode gpu: no GPU JPEG decoder"},
		{"gpu", onGPU, ""},
		{"auto", extractor.Stats{JPEGDecode: "cpu: --decode auto: no decode fidelity figures"}, ""},
		{"cpu", extractor.Stats{JPEGDecode: "cpu: --decode cpu (libjpeg-turbo, bit-exact with PIL)"}, ""},
		{"", onCPU, ""},
	} {
		if got := noGPUDecode(c.decode, c.st); got != c.want {
			t.Errorf("--decode %q, %q: %q, want %q", c.decode, c.st.JPEGDecode, got, c.want)
		}
	}
}
