// Package namespace is what the FUSE tree (package fs) knows of the bucket,
// with no FUSE in it: the listings of the bucket's '/'-delimited prefixes,
// read page by page and cached for MetadataTTL in one LRU bounded by the
// metadata budget with the tree's nodes (listing.go, budget.go), each kept
// packed in one byte blob (packed.go), and listed ahead of a walk; the answer to a lookup of a name, from a listing or by Stat
// calls (lookup.go); which directories are shown (emptydir.go); which
// version of an object a read serves, the features and slow failures of
// recent reads (memo.go); and the record of failed files behind
// .featurefs/failures (failures.go).
//
// Names come from fs/naming's rule; the store is asked through the
// pipeline's bucket (fs/features), which counts every call. A name is
// reported missing only from a complete listing or from Stat answering
// not-found, never from a partial listing; while the store fails, the last
// complete listing is served again. The tree's go-fuse nodes call
// Namespace (Lookup, OpenDir, CurrentVersion, Recent, ReadDone, ...), and
// the tree's kernel-cache notifier is told of every listing read
// completely from the store (New's listed).
//
// Every fan-out is bounded: the Stat calls and directory looks of all
// lookups together (statParallel), the background listing refreshes
// (maxRefreshes), the listings read ahead (aheadRuns), the listings
// (Config.MetadataBytes, with what the tree holds; budget.go), the recent
// features (recentBytes) and the failures record (maxFailedFiles). No lock
// is held across a call into the bucket.
package namespace
