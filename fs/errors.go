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

// errno is the one place where errors become errnos. Errors a user should
// hear about but that no errno explains are logged once per key and reason;
// bad objects are logged where they are recorded (FS.recordBad).
//
//	bucket.ErrNotFound            ENOENT
//	context.Canceled (interrupt)  EINTR
//	bucket.ErrAccessDenied        EACCES, logged (a refused token)
//	bad image, too large          EIO
//	context.DeadlineExceeded      EIO, logged (--read-timeout)
//	anything else                 EIO, logged
func (f *FS) errno(err error, key string) syscall.Errno {
	f.obs.countError(err)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, bucket.ErrNotFound):
		return syscall.ENOENT
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.Is(err, bucket.ErrAccessDenied):
		f.logOnce(key, "access denied", err)
		return syscall.EACCES
	case badObject(err):
		f.stats.ioErrors.Add(1)
		return syscall.EIO
	case errors.Is(err, context.DeadlineExceeded):
		f.stats.ioErrors.Add(1)
		f.logOnce(key, "timed out (--read-timeout)", err)
		return syscall.EIO
	default:
		f.stats.ioErrors.Add(1)
		f.logOnce(key, "error", err)
		return syscall.EIO
	}
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
