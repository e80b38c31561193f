package features

import (
	"time"

	"github.com/featurefs/featurefs/fs/archive"
	"github.com/featurefs/featurefs/fs/figures"
)

// Stats returns the pipeline's figures. The tree's own (lookups, opens,
// reads, listings in figures.TreeStats; BytesServed; Errors, the errors
// answered to readers by kind) are zero: the tree counts them and fills
// them in (fs.FS.Stats). A server's pipeline reports them zero.
func (p *Pipeline) Stats() figures.Stats {
	c := &p.stats
	nb, _ := p.bad.Size()
	xs := p.cfg.Extractor.Stats()
	now := p.now()
	st := figures.Stats{
		Source:    p.identity,
		Device:    p.cfg.Extractor.Device(),
		DType:     p.dtype,
		Cache:     p.cfg.Cache.Stats(),
		Extractor: xs,
		FS: figures.TreeStats{
			CacheHits: c.cacheHits.Load(), CacheMisses: c.cacheMisses.Load(), Extractions: c.extractions.Load(),
			CachePartialReads: c.cachePartialReads.Load(), HandoffReads: c.handoffReads.Load(),
			BadObjects: c.badObjects.Load(), BadObjectHits: c.badHits.Load(),
			CacheErrors: c.cacheErrors.Load(), BadObjectsKnown: nb,
			CacheWriteStats: p.writes.stats(),
		},
		RecentErrors: p.journal.Recent(),
	}
	for _, m := range p.cfg.Extractor.Models() {
		ms := figures.ModelStats{Name: m.Name, Digest: m.Digest}
		if !m.Loaded.IsZero() {
			ms.LoadedAt = m.Loaded.UTC().Format(time.RFC3339Nano)
			ms.LoadedUnix = float64(m.Loaded.UnixNano()) / 1e9
		}
		st.Models = append(st.Models, ms)
	}
	o := &p.obs
	st.UptimeSeconds = now.Sub(p.started).Seconds()
	st.CPUSeconds = figures.ProcessCPUSeconds()
	rate, window := o.rate.perSecond(now, p.started, rateWindow)
	st.Extraction = figures.ExtractionStats{
		RatePerSecond: rate, RateWindowSeconds: window,
		Completed: o.extracted.Load(), Failed: o.extractFailed.Load(),
		Batches: xs.Batches, BatchedItems: xs.BatchedItems,
	}
	if xs.Batches > 0 {
		st.Extraction.MeanBatchSize = float64(xs.BatchedItems) / float64(xs.Batches)
	}
	st.Queue = figures.QueueStats{Foreground: xs.QueuedForeground, Background: xs.QueuedBackground,
		DecodedWaiting: xs.Decoded, Running: xs.Running, InFlight: xs.InFlight}
	if n := st.FS.CacheHits + st.FS.CacheMisses; n > 0 {
		st.CacheHitRatio = float64(st.FS.CacheHits) / float64(n)
	}
	st.Store = figures.StoreStats{
		Gets: o.gets.Load(), GetErrors: o.getErrors.Load(), BytesFetched: o.bytesFetched.Load(),
		ListCalls: o.lists.Load(), ListErrors: o.listErrors.Load(),
		StatCalls: o.statCalls.Load(), StatErrors: o.statErrors.Load(),
	}
	st.Prefetch = p.pf.stats()
	if ab, ok := p.given.Bucket.(*archive.Bucket); ok {
		a := figures.ArchiveStats(ab.Stats())
		st.Archives = &a
	}
	if fst := p.cfg.FeatureStore; fst != nil {
		st.FeatureStore = &figures.FeatureStoreStats{Store: fst.Identity(), StoreOnly: p.cfg.StoreOnly, Stats: fst.Stats()}
	}
	return st
}
