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
