package figures

import (
	"errors"
	"fmt"
	"testing"

	"github.com/featurefs/featurefs/extractor/api"
)

func TestErrReason(t *testing.T) {
	for _, c := range []struct {
		key  string
		err  error
		want string
	}{
		{"a/b.jpg", &api.ImageError{Key: "a/b.jpg", Reason: "empty object"}, "empty object"},
		{"a/b.jpg", errors.New("a/b.jpg: a/b.jpg: truncated"), "truncated"},
		{"a/b.jpg", fmt.Errorf("get %q: %w", "a/b.jpg", errors.New("bucket: get s3://x/a/b.jpg: timeout")), "bucket: get s3://x/a/b.jpg: timeout"},
		{"a/b.jpg", errors.New("other/c.jpg: kept"), "other/c.jpg: kept"},
		{"", errors.New("x: y"), "x: y"},
	} {
		if got := ErrReason(c.key, c.err); got != c.want {
			t.Errorf("ErrReason(%q, %q) = %q, want %q", c.key, c.err, got, c.want)
		}
	}
}
