package figures

import (
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/featurefs/featurefs/fs/internal/lru"
)

// Error kinds counted in Stats.Errors and the featurefs_errors_total metric.
const (
	// ErrKindBadImage is a read refused because of the object's content
	// (not an image, corrupt, truncated, too large).
	ErrKindBadImage = "bad_image"
	// ErrKindNotFound is a read of an object that was listed but is gone.
	ErrKindNotFound = "not_found"
	// ErrKindTimeout is a read that ran past --read-timeout.
	ErrKindTimeout = "timeout"
	// ErrKindStore is a read or listing the object store failed
	// (unreachable, access denied, server errors).
	ErrKindStore = "store"
	// ErrKindOther is any other failed read or listing.
	ErrKindOther = "other"
)

// ErrorKinds lists the error kinds in the order they are shown.
func ErrorKinds() []string {
	return []string{ErrKindBadImage, ErrKindNotFound, ErrKindTimeout, ErrKindStore, ErrKindOther}
}

// ErrorCounts counts the errors answered to reads and listings, by kind
// (see ErrorKinds). A reader's interrupt and a lookup of a name the bucket
// does not hold are not counted.
type ErrorCounts struct {
	// BadImage counts reads refused because of the object's content.
	BadImage int64 `json:"bad_image"`
	// NotFound counts reads of objects listed but gone when fetched.
	NotFound int64 `json:"not_found"`
	// Timeout counts reads past --read-timeout.
	Timeout int64 `json:"timeout"`
	// Store counts reads and listings the object store failed.
	Store int64 `json:"store"`
	// Other counts any other failure.
	Other int64 `json:"other"`
}

// ByKind returns the counts keyed by ErrorKinds' names.
func (e ErrorCounts) ByKind() map[string]int64 {
	return map[string]int64{
		ErrKindBadImage: e.BadImage, ErrKindNotFound: e.NotFound, ErrKindTimeout: e.Timeout,
		ErrKindStore: e.Store, ErrKindOther: e.Other,
	}
}

// Total is the sum over the kinds.
func (e ErrorCounts) Total() int64 { return e.BadImage + e.NotFound + e.Timeout + e.Store + e.Other }

// ErrorTally counts the errors answered to readers by kind (Stats.Errors).
// The zero value counts from zero. Safe for concurrent use.
type ErrorTally struct {
	badImage, notFound, timeout, store, other atomic.Int64
}

// Count counts one error of kind (one of ErrorKinds; any other, ""
// included, counts nothing).
func (t *ErrorTally) Count(kind string) {
	switch kind {
	case ErrKindBadImage:
		t.badImage.Add(1)
	case ErrKindNotFound:
		t.notFound.Add(1)
	case ErrKindTimeout:
		t.timeout.Add(1)
	case ErrKindStore:
		t.store.Add(1)
	case ErrKindOther:
		t.other.Add(1)
	}
}

// Counts returns the counts so far.
func (t *ErrorTally) Counts() ErrorCounts {
	return ErrorCounts{
		BadImage: t.badImage.Load(), NotFound: t.notFound.Load(), Timeout: t.timeout.Load(),
		Store: t.store.Load(), Other: t.other.Load(),
	}
}

// StoreError marks an error returned by the object store (the pipeline's
// Bucket). It is transparent: same message, and errors.Is/As see through it.
// The errors it marks count as ErrKindStore.
type StoreError struct {
	// Op is the call that failed: get, list or stat.
	Op string
	// Err is the store's error.
	Err error
}

// Error is the store's message.
func (e *StoreError) Error() string { return e.Err.Error() }

// Unwrap returns the store's error.
func (e *StoreError) Unwrap() error { return e.Err }

// ErrorRecord is one recent error.
type ErrorRecord struct {
	// Time is when it happened (RFC 3339, UTC).
	Time string `json:"time"`
	// Key is the object key or prefix concerned.
	Key string `json:"key"`
	// Error is the reason.
	Error string `json:"error"`
}

// MaxRecentErrors is how many errors the stats file shows
// (Stats.RecentErrors).
const MaxRecentErrors = 20

// maxLogged bounds the set of errors Journal has logged (LogOnce,
// FirstLog): an error that left it is logged again.
const maxLogged = 4096

// Journal is what a pipeline, and the tree and server over it, tell about
// errors: the last MaxRecentErrors (Stats.RecentErrors), and each error
// logged once in a while rather than at every read (a bounded set). Safe
// for concurrent use.
type Journal struct {
	log    *slog.Logger
	now    func() time.Time
	logged *lru.LRU[string, struct{}] // ids already logged

	mu     sync.Mutex
	recent []ErrorRecord // GUARDED_BY(mu); oldest first
}

// NewJournal returns a journal that logs to log and stamps records with
// now.
func NewJournal(log *slog.Logger, now func() time.Time) *Journal {
	return &Journal{log: log, now: now, logged: lru.New[string, struct{}](maxLogged)}
}

// LogOnce logs an error for key unless the same key and error were logged
// recently (a bounded set), and records it in the recent errors.
func (j *Journal) LogOnce(key, reason string, err error) {
	msg := ErrReason(key, err)
	j.Record(key, reason+": "+msg)
	if !j.FirstLog(key + "\x00" + err.Error()) {
		return
	}
	j.log.Error("featurefs: "+reason, slog.String("key", key), slog.String("err", msg))
}

// FirstLog reports whether id was not logged recently, and remembers it (a
// bounded set shared with LogOnce): the caller logs only when it is true.
func (j *Journal) FirstLog(id string) bool {
	if _, seen := j.logged.Get(id); seen {
		return false
	}
	j.logged.Put(id, struct{}{}, 1)
	return true
}

// Record keeps an error among the last MaxRecentErrors. msg must not
// repeat key (see ErrReason).
func (j *Journal) Record(key, msg string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.recent) >= MaxRecentErrors {
		copy(j.recent, j.recent[1:])
		j.recent = j.recent[:len(j.recent)-1]
	}
	j.recent = append(j.recent, ErrorRecord{Time: j.now().UTC().Format(time.RFC3339), Key: key, Error: msg})
}

// Recent returns a copy of the recent errors, oldest first.
func (j *Journal) Recent() []ErrorRecord {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]ErrorRecord{}, j.recent...)
}

// ErrReason is err's message for a record or log line that names key in a
// field of its own: without the "KEY: " or `get "KEY": ` that the layers
// below put in front, so that the key shows once.
func ErrReason(key string, err error) string {
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
