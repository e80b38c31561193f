package features

import (
	"os"

	"github.com/featurefs/featurefs/cache"
	"github.com/featurefs/featurefs/fs/bucket"
)

// FileOpener is what a Cache offers when it can hand out a stored feature
// as a plain file of exactly its bytes (*cache.Store.OpenFile), for FUSE
// passthrough.
type FileOpener interface {
	OpenFile(k cache.Key, verified cache.FileID) (*os.File, int64, cache.FileID, bool, error)
}

var _ FileOpener = (*cache.Store)(nil)

// OpenCachedFile returns the cache's file of obj's feature at v, open and
// verified (cache.Store.OpenFile: not again when its FileID is verified),
// and its FileID, when the cache holds it as a plain file of the
// feature's bytes. Otherwise ok is false (a miss, a feature stored
// another way, a cache without files, a damaged file, an error): the
// caller then reads as before, which computes or logs what went wrong. It
// never computes, fetches or waits.
func (p *Pipeline) OpenCachedFile(v *View, obj bucket.Object, verified cache.FileID) (*os.File, cache.FileID, bool) {
	fo, ok := p.cfg.Cache.(FileOpener)
	if !ok {
		return nil, cache.FileID{}, false
	}
	f, size, fid, ok, err := fo.OpenFile(p.cacheKey(v, obj), verified)
	if err != nil || !ok {
		return nil, cache.FileID{}, false
	}
	if size != v.Size {
		f.Close()
		return nil, cache.FileID{}, false
	}
	p.stats.cacheHits.Add(1)
	return f, fid, true
}
