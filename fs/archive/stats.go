package archive

import "sync/atomic"

// Stats are an archive Bucket's figures (.featurefs/stats "archives",
// Prometheus featurefs_archive_*: fs/figures.ArchiveStats, which has the
// same fields).
type Stats struct {
	// IndexMemoryHits counts index lookups answered by the indexes kept in
	// memory.
	IndexMemoryHits int64 `json:"index_memory_hits"`
	// IndexStoreHits counts indexes read from the IndexStore (the feature
	// cache: Badger) instead of the archive.
	IndexStoreHits int64 `json:"index_store_hits"`
	// IndexBuilds counts indexes read from archives with ranged GETs (a
	// tar header walk, a zip central directory).
	IndexBuilds int64 `json:"index_builds"`
	// IndexStreamBuilds counts tar indexes built in the pass of a
	// streaming read (Stream).
	IndexStreamBuilds int64 `json:"index_stream_builds"`
	// RangedGets counts the ranged GETs of archives (indexes, members,
	// read-ahead chunks).
	RangedGets int64 `json:"ranged_gets"`
	// StreamGets counts the streaming GETs of archives (Stream: one per
	// archive read by warm or prefetch).
	StreamGets int64 `json:"stream_gets"`
	// BytesRead counts the archive bytes those GETs returned.
	BytesRead int64 `json:"bytes_read"`
	// StreamedMembers counts the members Stream handed over with their
	// bytes.
	StreamedMembers int64 `json:"streamed_members"`
	// StreamBreaks counts streams that broke part way (the members left
	// were read with ranged GETs).
	StreamBreaks int64 `json:"stream_breaks"`
	// BadArchives counts archives found bad (each with one log line).
	BadArchives int64 `json:"bad_archives"`
	// IndexBytes is what the indexes kept in memory cost now (at most
	// Config.MaxIndexBytes + Config.MaxLargeIndexBytes); the mount counts
	// it in fs.metadata_bytes.
	IndexBytes int64 `json:"index_bytes"`
}

// counters are Stats' live counters.
type counters struct {
	indexMemory, indexStore, indexBuilds, streamBuilds atomic.Int64
	streamGets, bytesRead, streamed, breaks            atomic.Int64
	badArchives                                        atomic.Int64
}

// Stats returns w's figures.
func (w *Bucket) Stats() Stats {
	return Stats{
		IndexMemoryHits: w.n.indexMemory.Load(), IndexStoreHits: w.n.indexStore.Load(),
		IndexBuilds: w.n.indexBuilds.Load(), IndexStreamBuilds: w.n.streamBuilds.Load(),
		RangedGets: w.Gets.Load(), StreamGets: w.n.streamGets.Load(), BytesRead: w.n.bytesRead.Load(),
		StreamedMembers: w.n.streamed.Load(), StreamBreaks: w.n.breaks.Load(), BadArchives: w.n.badArchives.Load(),
		IndexBytes: w.indexes.Bytes(),
	}
}
