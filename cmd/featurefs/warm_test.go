package main

import (
	"path"
	"strings"
	"testing"

	featurefs "github.com/featurefs/featurefs/fs"
)

// TestMatchReasonFollowsNamingRule: warm through a mount attaches the
// mount's recorded reason to a failed file by the naming rule's names:
// short, long (preferred where a short name is another key's long name)
// and shortened.
func TestMatchReasonFollowsNamingRule(t *testing.T) {
	long := "L/" + strings.Repeat("L", 250) + ".png"
	reasons := map[string]string{
		"c/a.jpg":     "reason a.jpg",
		"c/a.jpg.jpg": "reason a.jpg.jpg",
		"b.png":       "reason b.png",
		long:          "reason long",
	}
	paths := featurefs.FeaturePaths(long)
	hashed := paths[len(paths)-1]
	if base := path.Base(hashed); len(base) > 255 || !strings.HasPrefix(base, strings.Repeat("L", 200)) || !strings.HasSuffix(base, ".npy") {
		t.Fatalf("shortened name %q (%d bytes)", base, len(base))
	}
	for rel, want := range map[string]string{
		"c/a.jpg.npy":     "reason a.jpg",
		"c/a.jpg.jpg.npy": "reason a.jpg.jpg",
		"c/a.npy":         "reason a.jpg",
		"b.npy":           "reason b.png",
		"b.png.npy":       "reason b.png",
		hashed:            "reason long",
	} {
		if _, got, ok := matchReason(reasons, rel); !ok || got != want {
			t.Errorf("%s: %q, %v; want %q", rel, got, ok, want)
		}
	}
	if _, r, ok := matchReason(reasons, "nosuch.npy"); ok {
		t.Errorf("nosuch.npy matched %q", r)
	}
}
