package features

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/figures"
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
	reason := figures.ErrReason(key, err)
	p.bad.Put(id, badEntry{until: p.now().Add(p.cfg.NegativeTTL), reason: reason}, 1)
	p.journal.Record(key, reason)
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
