package naming

import (
	"encoding/base64"
	"testing"

	"github.com/featurefs/featurefs/extractor/spec"
)

// TestGeneratedMovedNameMeetsNoBucketName (issue 48 item 5): a generated
// file keeps its usual name unless the bucket takes it; its moved name is
// of the shortened form, which no entry from the bucket is shown under (a
// directory or file called so is shortened itself), and is the one
// docs/AUGMENT.md gives.
func TestGeneratedMovedNameMeetsNoBucketName(t *testing.T) {
	for _, tc := range []struct{ name, moved string }{
		{"augment.jsonl", "augment.jsonl~515fabe7447a63f7"},
		{"predictions.jsonl", "predictions.jsonl~73a657540c708401"},
		{spec.LayersFile, "layers~e3b816898ca5ba5f"},
	} {
		g := Generated(tc.name)
		if g.Name(false) != tc.name || g.Name(true) != tc.moved || g.Moved() != tc.moved {
			t.Errorf("%s: Name(false) %q, Name(true) %q, Moved %q; want %q and %q", tc.name, g.Name(false), g.Name(true), g.Moved(), tc.name, tc.moved)
		}
		if Usable(tc.moved) || DirName(tc.moved) == tc.moved {
			t.Errorf("%s: a bucket directory %q is shown under its own name: the moved file would meet it", tc.name, tc.moved)
		}
		if !g.Is(tc.name) || !g.Is(tc.moved) || g.Is(tc.name+"x") || g.Is(tc.moved+".npy") {
			t.Errorf("%s: Is answers wrong", tc.name)
		}
	}
}

// TestRawName: a name that is not UTF-8 is given as its bytes in base64,
// which decode to it; a UTF-8 name needs nothing.
func TestRawName(t *testing.T) {
	for _, n := range []string{"img0.npy", "chat-été.npy", "\u2028.npy", ""} {
		if r := RawName(n); r != "" {
			t.Errorf("RawName(%q) = %q, want none", n, r)
		}
	}
	for _, n := range []string{"\xff\xfe-bad-utf8.npy", "a\xc3.npy", "\xed\xa0\x80.npy"} {
		b, err := base64.StdEncoding.DecodeString(RawName(n))
		if err != nil || string(b) != n {
			t.Errorf("RawName(%q) = %q: decodes to %q, %v", n, RawName(n), b, err)
		}
	}
}
