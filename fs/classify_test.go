package fs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/figures"
)

// serverSilent is an error as a feature server's client returns it when
// the server does not answer in time: it says it is a timeout.
type serverSilent struct{}

func (serverSilent) Error() string {
	return "http://s: no answer within 30s: feature server unavailable"
}
func (serverSilent) Timeout() bool { return true }

// One classification gives the errno, the stats' kind and the log reason:
// a feature server's timeout is a timeout (it was "other"), as are a
// network timeout from the store and the --read-timeout deadline.
func TestClassify(t *testing.T) {
	netTimeout := &net.OpError{Op: "dial", Net: "tcp", Err: &timeoutErr{}}
	cases := []struct {
		name string
		err  error
		want errClass
	}{
		{"nil", nil, errClass{}},
		{"interrupt", fmt.Errorf("read: %w", context.Canceled), errClass{errno: syscall.EINTR}},
		{"bad image", &api.ImageError{Key: "a.jpg", Reason: "not an image"}, errClass{errno: syscall.EIO, kind: figures.ErrKindBadImage}},
		{"too large", fmt.Errorf("x: %w", bucket.ErrTooLarge), errClass{errno: syscall.EIO, kind: figures.ErrKindBadImage}},
		{"no such name", bucket.ErrNotFound, errClass{errno: syscall.ENOENT}},
		{"listed then gone", &figures.StoreError{Op: "get", Err: bucket.ErrNotFound}, errClass{errno: syscall.ENOENT, kind: figures.ErrKindNotFound}},
		{"refused token", fmt.Errorf("x: %w", bucket.ErrAccessDenied), errClass{errno: syscall.EACCES, kind: figures.ErrKindOther, log: "access denied"}},
		{"read timeout", fmt.Errorf("x: %w", context.DeadlineExceeded), errClass{errno: syscall.EIO, kind: figures.ErrKindTimeout, log: "timed out (--read-timeout)"}},
		{"server timeout", fmt.Errorf("extract: %w", serverSilent{}), errClass{errno: syscall.EIO, kind: figures.ErrKindTimeout, log: "timed out"}},
		{"store network timeout", &figures.StoreError{Op: "list", Err: netTimeout}, errClass{errno: syscall.EIO, kind: figures.ErrKindTimeout, log: "timed out"}},
		{"store error", &figures.StoreError{Op: "list", Err: errors.New("500")}, errClass{errno: syscall.EIO, kind: figures.ErrKindStore, log: "error"}},
		{"other", errors.New("boom"), errClass{errno: syscall.EIO, kind: figures.ErrKindOther, log: "error"}},
	}
	for _, c := range cases {
		if got := classify(c.err); got != c.want {
			t.Errorf("%s: classify = %+v, want %+v", c.name, got, c.want)
		}
	}
}

type timeoutErr struct{}

func (*timeoutErr) Error() string   { return "i/o timeout" }
func (*timeoutErr) Timeout() bool   { return true }
func (*timeoutErr) Temporary() bool { return true }
