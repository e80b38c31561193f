package fs

import (
	"context"
	"errors"
	"syscall"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/figures"
	"github.com/featurefs/featurefs/fs/views"
)

// errClass is how an error answered to a reader is classified: its
// errno, its kind in the stats and metrics ("" when it is not counted as an
// error) and, for errors a user should hear about that no errno explains,
// the reason it is logged under ("" when it is not logged here; bad objects
// are logged where they are recorded, in the pipeline).
type errClass struct {
	errno syscall.Errno
	kind  string
	log   string
}

// timeout is an error that says it is one (net.Error's method): a
// context's deadline, a network timeout, a feature server silent past the
// client's timeout.
type timeout interface{ Timeout() bool }

// classify is the one classification of errors answered to readers:
// errno (FS.errno), the stats' error kinds and the log lines come from it.
//
//	context.Canceled (interrupt)  EINTR, not counted
//	bucket.ErrNotFound            ENOENT; counted (not_found) only when a
//	                              listed object was gone at its fetch
//	views.ErrTooManyRows          EFBIG, other, logged (an array past its rows)
//	bucket.ErrAccessDenied        EACCES, logged (a refused token)
//	bad image, too large          EIO, bad_image
//	a timeout (Timeout() true)    EIO, timeout, logged (--read-timeout
//	                              when it is that deadline)
//	an object store's error       EIO, store, logged
//	anything else                 EIO, other, logged
func classify(err error) errClass {
	var se *figures.StoreError
	isStore := errors.As(err, &se)
	storeOr := func(k string) string {
		if isStore {
			return figures.ErrKindStore
		}
		return k
	}
	var to timeout
	switch {
	case err == nil:
		return errClass{}
	case errors.Is(err, context.Canceled):
		return errClass{errno: syscall.EINTR}
	case features.BadObject(err):
		return errClass{errno: syscall.EIO, kind: figures.ErrKindBadImage}
	case errors.Is(err, bucket.ErrNotFound):
		if isStore && se.Op == "get" {
			return errClass{errno: syscall.ENOENT, kind: figures.ErrKindNotFound} // listed, then gone
		}
		return errClass{errno: syscall.ENOENT} // a name that is not there
	case errors.Is(err, views.ErrTooManyRows):
		return errClass{errno: syscall.EFBIG, kind: figures.ErrKindOther, log: "too large"}
	case errors.Is(err, bucket.ErrAccessDenied):
		return errClass{errno: syscall.EACCES, kind: storeOr(figures.ErrKindOther), log: "access denied"}
	case errors.Is(err, context.DeadlineExceeded):
		return errClass{errno: syscall.EIO, kind: figures.ErrKindTimeout, log: "timed out (--read-timeout)"}
	case errors.As(err, &to) && to.Timeout():
		return errClass{errno: syscall.EIO, kind: figures.ErrKindTimeout, log: "timed out"}
	default:
		return errClass{errno: syscall.EIO, kind: storeOr(figures.ErrKindOther), log: "error"}
	}
}

// errno turns an error answered to a reader into its errno (classify),
// counting it among the tree's figures (Stats' errors by kind, io_errors)
// and logging it once per key and reason in the pipeline's journal.
func (f *FS) errno(err error, key string) syscall.Errno {
	c := classify(err)
	f.stats.errors.Count(c.kind)
	if c.errno == syscall.EIO {
		f.stats.ioErrors.Add(1)
	}
	if c.log != "" {
		f.journal.LogOnce(key, c.log, err)
	}
	return c.errno
}
