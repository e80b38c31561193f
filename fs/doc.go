// Package fs is featurefs's FUSE tree, built on go-fuse's fs package:
//
//	features/<model>/<layer>/<prefix>.../<name>.npy   one feature tensor per image object
//	features/<model>/layers                           the model's layer table
//	.featurefs/stats                                  JSON figures (cache, extraction, errors)
//
// # Data flow
//
// Lookups and directory listings go to the bucket ([bucket.Bucket.List], one
// '/' level at a time, page by page). A read asks the [Cache] first; on a miss
// it asks the [Extractor], whose Fetch reads the object from the bucket, and
// stores the result in the cache. Nothing below this package knows about FUSE;
// errors become errnos in one place (errors.go).
//
// # Names
//
// Only objects whose extension is an image extension (case-insensitive) are
// shown, with the extension replaced by .npy; when several image objects share
// a stem (a.jpg and a.png) each keeps its extension: a.jpg.npy and a.png.npy.
// Listings are sorted by key, so every key "S.<ext>" lies between "S." and
// "S.<largest extension>": an object's name is decided as soon as a page
// reaching past that bound (or the end of the listing) has been read, so two
// names straddling a page boundary are still decided from the complete set
// and the same name comes out whatever the page size. Lookups that cannot be
// answered from a listing Stat every candidate key (S.ext for each extension,
// lower and upper case) and apply the same rule; an extension in mixed case
// (a.Png) is seen only by listings. A directory named like a file shadows it.
//
// # Caching
//
// The tree of features/, the models and their layers is built once at mount.
// Directory listings are kept for Config.MetadataTTL in a cache bounded by
// entries (least recently used listing evicted); a name is reported missing
// only from a complete listing or from Stat answering not-found, never from a
// partial listing. Kernel entry and attribute timeouts are MetadataTTL too.
// Feature files are immutable for a given object version: they open with
// FOPEN_KEEP_CACHE, their size follows from the layer's shape (stat never
// computes) and their inode number is a hash of the path and the object's
// ETag, so an overwritten object is a new file after MetadataTTL. An object
// that fails because of its content (not an image, corrupt, too large) is
// logged once with its key and reason and answers EIO without being fetched
// again for Config.NegativeTTL (a bounded map).
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
// The bucket and the extractor are wrapped in New (observe.go), so every
// caller, reads and prefetch alike, is counted where the work happens: bytes
// and calls of the store, extractions completed (an extraction shared by
// several callers counts once) in one-second slots for the rate, and errors
// answered to readers by kind (errno). .featurefs/stats renders one Stats
// snapshot as JSON; the Prometheus collector (metrics.go) reads the same
// snapshot on every scrape, so the two always agree.
//
// # Read-only
//
// The mount is read-only (MS_RDONLY), and every node also answers EROFS to
// every change, so writes, creates, renames, links and attribute changes fail
// with EROFS.
package fs
