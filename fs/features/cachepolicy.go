package features

import (
	"time"

	"github.com/featurefs/featurefs/cache"
)

// WorkloadSetter is what a Cache offers when it adapts to the work around
// it (*cache.Store.SetWorkload): under --cache-compression auto the store
// compresses large features on the write path only where the codec is a
// small share of what extracting a feature costs, and compacts the raw
// ones at rest only while the pipeline does nothing (docs/CACHE.md,
// "Compression of file-stored features").
type WorkloadSetter interface {
	SetWorkload(cache.Workload)
}

var _ WorkloadSetter = (*cache.Store)(nil)

// tellCache gives the cache the pipeline's activity and extraction cost
// (New), or takes them back (Close).
func (p *Pipeline) tellCache(on bool) {
	ws, ok := p.cfg.Cache.(WorkloadSetter)
	if !ok {
		return
	}
	if !on {
		ws.SetWorkload(cache.Workload{})
		return
	}
	ws.SetWorkload(cache.Workload{Activity: p.Activity, Extraction: p.extraction})
}

// extraction returns the extractor's inference time so far and the images
// it batched: a feature's compute cost, as the cache's auto policy
// measures it. It is the batches' wall time (on a CPU, with every core
// busy), so a CPU host's cost is understated, never overstated; a remote
// extractor reports none, and the cache then keeps large features raw.
func (p *Pipeline) extraction() (time.Duration, int64) {
	st := p.cfg.Extractor.Stats()
	return time.Duration(st.InferSeconds * float64(time.Second)), st.BatchedItems
}
