package fs

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/fs/bucket"
)

// errObjectChanged is returned when an object's ETag changed between the
// listing that named it and the read that fetched it. The next listing, after
// MetadataTTL, shows the new version.
var errObjectChanged = errors.New("object changed since it was listed")

// errBadFeature is returned when the extractor's answer is not the size the
// layer's shape promises.
var errBadFeature = errors.New("feature has the wrong size")

// badObject reports whether err is caused by the object's content and is
// permanent for that version of it: such errors are cached negatively.
func badObject(err error) bool {
	return errors.Is(err, extractor.ErrBadImage) || errors.Is(err, bucket.ErrTooLarge)
}

// errClass is how an error answered to a reader is classified: its
// errno, its kind in the stats and metrics ("" when it is not counted as an
// error) and, for errors a user should hear about that no errno explains,
// the reason it is logged under ("" when it is not logged here; bad objects
// are logged where they are recorded, FS.recordBad).
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
//	bucket.ErrAccessDenied        EACCES, logged (a refused token)
//	bad image, too large          EIO, bad_image
//	a timeout (Timeout() true)    EIO, timeout, logged (--read-timeout
//	                              when it is that deadline)
//	an object store's error       EIO, store, logged
//	anything else                 EIO, other, logged
func classify(err error) errClass {
	var se *storeError
	isStore := errors.As(err, &se)
	storeOr := func(k string) string {
		if isStore {
			return ErrKindStore
		}
		return k
	}
	var to timeout
	switch {
	case err == nil:
		return errClass{}
	case errors.Is(err, context.Canceled):
		return errClass{errno: syscall.EINTR}
	case badObject(err):
		return errClass{errno: syscall.EIO, kind: ErrKindBadImage}
	case errors.Is(err, bucket.ErrNotFound):
		if isStore && se.op == "get" {
			return errClass{errno: syscall.ENOENT, kind: ErrKindNotFound} // listed, then gone
		}
		return errClass{errno: syscall.ENOENT} // a name that is not there
	case errors.Is(err, bucket.ErrAccessDenied):
		return errClass{errno: syscall.EACCES, kind: storeOr(ErrKindOther), log: "access denied"}
	case errors.Is(err, context.DeadlineExceeded):
		return errClass{errno: syscall.EIO, kind: ErrKindTimeout, log: "timed out (--read-timeout)"}
	case errors.As(err, &to) && to.Timeout():
		return errClass{errno: syscall.EIO, kind: ErrKindTimeout, log: "timed out"}
	default:
		return errClass{errno: syscall.EIO, kind: storeOr(ErrKindOther), log: "error"}
	}
}

// errno turns an error answered to a reader into its errno (classify),
// counting it and logging it once per key and reason.
func (f *FS) errno(err error, key string) syscall.Errno {
	c := classify(err)
	f.obs.countError(c.kind)
	if c.errno == syscall.EIO {
		f.stats.ioErrors.Add(1)
	}
	if c.log != "" {
		f.logOnce(key, c.log, err)
	}
	return c.errno
}

// logOnce logs an error for key unless the same key and error were logged
// recently (a bounded set), and records it in the stats file's recent
// errors.
func (f *FS) logOnce(key, reason string, err error) {
	msg := errReason(key, err)
	f.recordError(key, reason+": "+msg)
	id := key + "\x00" + err.Error()
	if _, seen := f.logged.Get(id); seen {
		return
	}
	f.logged.Put(id, struct{}{}, 1)
	f.log.Error("featurefs: "+reason, slog.String("key", key), slog.String("err", msg))
}

// errReason is err's message for a record or log line that names key in a
// field of its own: without the "KEY: " or `get "KEY": ` that the layers
// below put in front, so that the key shows once.
func errReason(key string, err error) string {
	msg := err.Error()
	if key == "" {
		return msg
	}
	q := strconv.Quote(key)
	for {
		rest := msg
		for _, p := range []string{key + ": ", q + ": ", "get " + q + ": "} {
			rest = strings.TrimPrefix(rest, p)
		}
		if rest == msg {
			return msg
		}
		msg = rest
	}
}

// recordError keeps the last few errors for the stats file. msg must not
// repeat key (see errReason).
func (f *FS) recordError(key, msg string) {
	f.errMu.Lock()
	defer f.errMu.Unlock()
	if len(f.recent) >= maxRecentErrors {
		copy(f.recent, f.recent[1:])
		f.recent = f.recent[:len(f.recent)-1]
	}
	f.recent = append(f.recent, ErrorRecord{Time: f.now().UTC().Format(time.RFC3339), Key: key, Error: msg})
}

// logRename logs once (a bounded set) that an object or prefix is shown
// under a name other than the plain rule's, and why (package doc, Names).
func (f *FS) logRename(key, name, why string) {
	id := "rename\x00" + key + "\x00" + name
	if _, seen := f.logged.Get(id); seen {
		return
	}
	f.logged.Put(id, struct{}{}, 1)
	f.log.Warn("featurefs: renamed to avoid a collision or an unusable name", slog.String("key", key), slog.String("name", name), slog.String("why", why))
}
