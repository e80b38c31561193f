package fs

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/featurefs/featurefs/extractor"
)

// The stats file's recent errors and the log name an object's key once: in
// the record's key and the log line's key=, not again in front of the
// reason (it used to read "d/bad.jpg: d/bad.jpg: not an image", and
// `d/huge.png: get "d/huge.png": ...`). The store's own message may still
// say where the object is (bucket: get s3://BUCKET/KEY: ...).
func TestErrorRecordsNameTheKeyOnce(t *testing.T) {
	b := newFakeBucket(1000)
	b.put("d/bad.jpg", []byte("BAD: not a jpeg"))
	b.put("d/huge.png", make([]byte, 4096))
	e := testMount(t, b, func(c *Config) { c.MaxObjectSize = 1024 })
	for _, name := range []string{"bad.npy", "huge.npy"} {
		for range 2 { // the second read is answered from the negative cache
			if _, err := os.ReadFile(e.path("features", "tiny", "layer1", "d", name)); !errors.Is(err, syscall.EIO) {
				t.Fatalf("read %s: %v, want EIO", name, err)
			}
		}
	}
	recs := e.fs.Stats().RecentErrors
	seen := map[string]bool{}
	for _, r := range recs {
		seen[r.Key] = true
		if strings.HasPrefix(r.Error, r.Key) || strings.Contains(r.Error, fmt.Sprintf("%q", r.Key)) {
			t.Errorf("recent error %q: %q puts the key in front of the reason again", r.Key, r.Error)
		}
	}
	if !seen["d/bad.jpg"] || !seen["d/huge.png"] {
		t.Errorf("recent errors %+v lack d/bad.jpg or d/huge.png", recs)
	}
	for _, r := range recs {
		if r.Key == "d/bad.jpg" && r.Error != "not an image" {
			t.Errorf("d/bad.jpg recorded as %q, want the reason alone, \"not an image\"", r.Error)
		}
	}
	for _, line := range strings.Split(e.logs.String(), "\n") {
		if strings.Contains(line, "key=d/bad.jpg") && strings.Count(line, "d/bad.jpg") != 1 {
			t.Errorf("log line names d/bad.jpg more than once: %s", line)
		}
		if strings.Contains(line, "key=d/huge.png") && (strings.Contains(line, `err="d/huge.png`) || strings.Contains(line, `\"d/huge.png\"`)) {
			t.Errorf("log line puts d/huge.png in front of the reason again: %s", line)
		}
	}
}

func TestErrReason(t *testing.T) {
	for _, c := range []struct {
		key  string
		err  error
		want string
	}{
		{"a/b.jpg", &extractor.ImageError{Key: "a/b.jpg", Reason: "empty object"}, "empty object"},
		{"a/b.jpg", errors.New("a/b.jpg: a/b.jpg: truncated"), "truncated"},
		{"a/b.jpg", fmt.Errorf("get %q: %w", "a/b.jpg", errors.New("bucket: get s3://x/a/b.jpg: timeout")), "bucket: get s3://x/a/b.jpg: timeout"},
		{"a/b.jpg", errors.New("other/c.jpg: kept"), "other/c.jpg: kept"},
		{"", errors.New("x: y"), "x: y"},
	} {
		if got := errReason(c.key, c.err); got != c.want {
			t.Errorf("errReason(%q, %q) = %q, want %q", c.key, c.err, got, c.want)
		}
	}
}
