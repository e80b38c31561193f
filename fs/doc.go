// Package fs is featurefs's FUSE tree, built on go-fuse's fs package:
//
//	features/<model>/<layer>/<prefix>.../<name>.npy   one feature tensor per image object
//	features/<model>/layers                           the model's layer table
//	arrays/<model>/<layer>/<prefix>.npy               a directory's features as one array
//	predictions/<model>/<prefix>.../predictions.jsonl the top classes of the prefix's images
//	.featurefs/stats                                  JSON figures (cache, extraction, errors)
//
// # Data flow
//
// Lookups and directory listings are the namespace's (package
// fs/namespace, FUSE-free): it reads the bucket ([bucket.Bucket.List], one
// '/' level at a time, page by page), keeps the listings and decides what a
// name stands for, by fs/naming's rule (its package documentation says
// what every object is shown as). A read of a feature file goes through
// the read path of package features (FUSE-free, the feature server's too):
// the negative cache, in-flight sharing, the [Cache], on a miss the
// [Extractor], whose Fetch reads the object from the bucket, and the cache
// write; prefetch and warm-up are there too. Every other generated
// directory and file (arrays/, predictions/, augment.jsonl, the layers
// tables, archives' plain members) is described by package fs/views
// without FUSE, and rendered here by two generic nodes (viewnodes.go).
// This package holds the go-fuse nodes; nothing below it knows about
// FUSE. Errors become errnos in one place (errors.go).
//
// # Caching
//
// The tree of features/, the models and their layers is built once at mount.
// Directory listings are kept by the namespace for the pipeline's MetadataTTL
// (features.Config) in a cache bounded by entries (least recently used
// listing evicted); a name is reported missing
// only from a complete listing or from Stat answering not-found, never from a
// partial listing. The kernel keeps directories' entries and attributes,
// and names found missing, for MetadataTTL too. Feature files are immutable
// for a given object version: files are never opened (their OPEN answers
// ENOSYS, and the kernel sends no OPEN, RELEASE or FLUSH after that: see
// noOpen), the kernel keeps their pages across opens, their size follows
// from the layer's shape (stat never computes) and their inode
// number is a hash of the path and the object's ETag, so an overwritten
// object is a new file. The kernel keeps their entries and attributes for a
// day and is told to drop those a listing read again shows deleted or
// changed (kernelcache.go): a path walk through a directory after
// MetadataTTL sees the change, the pages of a changed file are dropped when
// the listing is read, and a second epoch asks featurefs nothing but the
// pages the kernel no longer holds, which a read copies from the cache's
// part of the feature (cache.Store.ReadAt). Extended attributes answer
// ENOSYS, so the kernel stops asking for them (ls -l asked two per file),
// but with --augment, where view files publish their parameters in one
// (augxattr.go). An object
// that fails because of its content (not an image, corrupt, too large) is
// logged once with its key and reason and answers EIO without being fetched
// again for features.Config.NegativeTTL (a bounded map).
//
// # Parallelism
//
// go-fuse serves requests concurrently; MaxBackground is raised so many
// readers run at once. Concurrent reads of one feature share one cache lookup
// and extraction. Work started by a read runs detached from the reader's
// interrupt (bounded by Config.ReadTimeout), so a reader interrupted and
// retrying, as Go programs are by their runtime's preemption signals, finds
// the result in flight or in the cache instead of starting over.
//
// # Figures
//
// The bucket and the extractor are wrapped by the read path
// (features/observe.go), so every caller, reads and prefetch alike, and the
// tree's listings, is counted where the work happens: bytes
// and calls of the store, extractions completed (an extraction shared by
// several callers counts once) in one-second slots for the rate. The tree
// counts its own figures (counters: lookups, opens, reads, listings, and the
// errors it answers by kind, in errno) and fills them into the pipeline's
// snapshot (FS.Stats). .featurefs/stats renders one figures.Stats snapshot
// as JSON; the Prometheus collector (fs/figures) reads the same snapshot on
// every scrape, so the two always agree.
//
// # Read-only
//
// The mount is read-only (MS_RDONLY), and every node also answers EROFS to
// every change, so writes, creates, renames, links and attribute changes fail
// with EROFS.
package fs
