package main

import (
	"strings"
	"testing"
)

// TestExtractAugmentFlags: extract's --augment flags are checked before
// anything runs, each bad value a usage error naming the flag.
func TestExtractAugmentFlags(t *testing.T) {
	base := []string{"--model", "m.onnx", "--layer", "1", "-o", "out", "img.jpg"}
	for _, tc := range []struct {
		args []string
		want string // "" for accepted
	}{
		{[]string{"--augment", "4"}, ""},
		{[]string{"--augment", "4", "--augment-seed", "9", "--augment-scale", "0.2,0.9", "--augment-ratio", "0.5,2"}, ""},
		{[]string{"--augment", "-1"}, "--augment -1"},
		{[]string{"--augment", "1001"}, "--augment 1001"},
		{[]string{"--augment", "2", "--augment-scale", "0.5"}, "--augment-scale"},
		{[]string{"--augment", "2", "--augment-scale", "1,0.5"}, "--augment-scale"},
		{[]string{"--augment", "2", "--augment-ratio", "x,1"}, "--augment-ratio"},
		{[]string{"--augment", "2", "--augment-ratio", "0,1"}, "--augment-ratio"},
	} {
		a, _, _, _, err := parseExtract(append(append([]string{}, tc.args...), base...))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want == "" && a.aug.views == 0:
			t.Errorf("%v: --augment not read", tc.args)
		case tc.want != "" && (err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: %v; want a usage error naming %s", tc.args, err, tc.want)
		}
	}
}

// TestViewKey: an extract output's identity key is the image's path under
// the root, with its extension, as a local-directory mount names it.
func TestViewKey(t *testing.T) {
	for _, tc := range []struct{ name, img, want string }{
		{"train/cat/a.npy", "/d/train/cat/a.jpg", "train/cat/a.jpg"},
		{"cat/a.jpg.npy", "/d/cat/a.jpg", "cat/a.jpg"},
		{"a.png.npy", "/x/a.png", "a.png"},
		{"b.npy", "/x/b.JPEG", "b.JPEG"},
	} {
		if got := viewKey(tc.name, tc.img); got != tc.want {
			t.Errorf("viewKey(%q, %q) = %q, want %q", tc.name, tc.img, got, tc.want)
		}
	}
}
