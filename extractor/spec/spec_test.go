package spec

import (
	"strings"
	"testing"
)

func TestLayerNames(t *testing.T) {
	for _, i := range []int{0, 1, 12, 100} {
		if n, ok := LayerIndex(LayerName(i)); !ok || n != i {
			t.Errorf("LayerIndex(LayerName(%d) = %q) = %d, %v", i, LayerName(i), n, ok)
		}
	}
	for _, name := range []string{"layer", "layer012", "layer-1", "layer1a", "Layer1", "pool", LayersFile, "layer99999999999999999999999"} {
		if n, ok := LayerIndex(name); ok {
			t.Errorf("LayerIndex(%q) = %d, want not a layer name", name, n)
		}
	}
	for name, want := range map[string]bool{"layer0": true, "layer012": true, "layer": false, "layers": false, "layer1a": false, "pool": false} {
		if got := LayerLike(name); got != want {
			t.Errorf("LayerLike(%q) = %v, want %v", name, got, want)
		}
	}
	if SplitName(SplitRaw) != "raw" || SplitName(7) != "layer7" {
		t.Errorf("SplitName: %q %q", SplitName(SplitRaw), SplitName(7))
	}
	for _, s := range []string{"auto", "none", "raw", "layer7"} {
		p, err := ParseSplitPolicy(s)
		if err != nil || p.String() != s {
			t.Errorf("ParseSplitPolicy(%q) = %v, %v; String %q", s, p, err, p.String())
		}
	}
}

func TestIsImage(t *testing.T) {
	for base, want := range map[string]bool{"a.jpg": true, "a.JPEG": true, "a.Png": true, ".jpg": true,
		"a.txt": false, "jpg": false, "a": false, "a.jpg.npy": false, "a.\u212apg": false} {
		if got := IsImage(base, nil); got != want {
			t.Errorf("IsImage(%q, default) = %v, want %v", base, got, want)
		}
	}
	if !IsImage("a.TIFF", []string{"tiff"}) || IsImage("a.jpg", []string{"tiff"}) {
		t.Error("IsImage ignores its extensions")
	}
	if got := strings.Join(DefaultImageExtensions(), ","); got != "jpg,jpeg,png" {
		t.Errorf("DefaultImageExtensions = %s", got)
	}
	d := DefaultImageExtensions()
	d[0] = "x"
	if DefaultImageExtensions()[0] != "jpg" {
		t.Error("DefaultImageExtensions returns a shared slice")
	}
}

func TestPaths(t *testing.T) {
	t.Setenv("HOME", "/h")
	t.Setenv("FEATUREFS_ORT_LIB", "")
	for got, want := range map[string]string{
		Dir(): "/h/.cache/featurefs", DefaultCacheDir(): "/h/.cache/featurefs/cache",
		DefaultLogFile(): "/h/.cache/featurefs/featurefs.log", DefaultProfileDir(): "/h/.cache/featurefs/profiles",
		TensorRTCacheDir(): "/h/.cache/featurefs/tensorrt",
		DefaultORTLib():    "/h/.cache/featurefs/lib/onnxruntime-" + ORTVersion + "/libonnxruntime.so.1",
	} {
		if got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	}
	t.Setenv("FEATUREFS_ORT_LIB", "/x.so")
	if DefaultORTLib() != "/x.so" {
		t.Errorf("DefaultORTLib ignores FEATUREFS_ORT_LIB: %s", DefaultORTLib())
	}
}
