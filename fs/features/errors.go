package features

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/bucket"
)

// ErrObjectChanged is matched by Feature's error when the object's ETag is
// no longer the one given: it changed between the listing that named it and
// the read that fetched it. The next listing, after MetadataTTL, shows the
// new version.
var ErrObjectChanged = errors.New("object changed since it was listed")

// ErrNotImage is matched by Feature's error for an object whose name is
// not an image's (Config.ImageExtensions: its extension is not one of the image
// extensions). It matches bucket.ErrNotFound: there is no such feature.
var ErrNotImage = fmt.Errorf("not an image (its extension is not one of --image-extensions): %w", bucket.ErrNotFound)

// errBadFeature is returned when the extractor's answer is not the size the
// layer's shape promises.
var errBadFeature = errors.New("feature has the wrong size")

// BadObject reports whether err is caused by the object's content and is
// permanent for that version of it: such errors are cached negatively.
func BadObject(err error) bool {
	return errors.Is(err, api.ErrBadImage) || errors.Is(err, bucket.ErrTooLarge)
}

// badEntry records a bad object version.
type badEntry struct {
	until  time.Time
	reason string
}

// badKey names one version of one object.
func (p *Pipeline) badKey(key, etag string) string { return key + "\x00" + etag }

// recordBad remembers a bad object version for NegativeTTL and logs it once.
func (p *Pipeline) recordBad(key, etag string, err error) {
	id := p.badKey(key, etag)
	_, known := p.bad.Get(id)
	reason := ErrReason(key, err)
	p.bad.Put(id, badEntry{until: p.now().Add(p.cfg.NegativeTTL), reason: reason}, 1)
	p.recordError(key, reason)
	if known {
		return
	}
	p.stats.badObjects.Add(1)
	p.log.Warn("featurefs: bad object", slog.String("key", key), slog.String("etag", etag), slog.String("err", reason))
}

// isBad returns the reason an object version is known bad, if it is and
// NegativeTTL has not passed.
func (p *Pipeline) isBad(key, etag string) (string, bool) {
	e, ok := p.bad.Get(p.badKey(key, etag))
	if !ok || !p.now().Before(e.until) {
		return "", false
	}
	return e.reason, true
}

// LogOnce logs an error for key unless the same key and error were logged
// recently (a bounded set), and records it in the stats' recent errors.
func (p *Pipeline) LogOnce(key, reason string, err error) {
	msg := ErrReason(key, err)
	p.recordError(key, reason+": "+msg)
	if !p.FirstLog(key + "\x00" + err.Error()) {
		return
	}
	p.log.Error("featurefs: "+reason, slog.String("key", key), slog.String("err", msg))
}

// FirstLog reports whether id was not logged recently, and remembers it (a
// bounded set shared with LogOnce): the caller logs only when it is true.
func (p *Pipeline) FirstLog(id string) bool {
	if _, seen := p.logged.Get(id); seen {
		return false
	}
	p.logged.Put(id, struct{}{}, 1)
	return true
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

// recordError keeps the last few errors for the stats file. msg must not
// repeat key (see ErrReason).
func (p *Pipeline) recordError(key, msg string) {
	p.errMu.Lock()
	defer p.errMu.Unlock()
	if len(p.recent) >= maxRecentErrors {
		copy(p.recent, p.recent[1:])
		p.recent = p.recent[:len(p.recent)-1]
	}
	p.recent = append(p.recent, ErrorRecord{Time: p.now().UTC().Format(time.RFC3339), Key: key, Error: msg})
}
