// Package figures is what featurefs reports about itself: the stats
// document (Stats: the JSON of MOUNT/.featurefs/stats and of a feature
// server's GET /v1/stats), the Prometheus metrics read from it
// (NewCollector, MetricsHandler), the kinds errors answered to readers are
// counted under (ErrorKinds, ErrorTally, StoreError) and the journal of
// recent errors, each logged once in a while (Journal).
//
// It counts nothing itself and knows neither the tree nor the read path:
// each part counts its own figures where the work happens and fills its
// part of one Stats snapshot. The read path (fs/features) fills the cache,
// extraction, store, queue and prefetch figures; the tree (package fs)
// fills its own (lookups, opens, reads, listings, kernel notifications)
// and the errors it answered, by kind. The stats file and the metrics
// render the same snapshot, so the two always agree.
package figures
