// Package fs is featurefs's FUSE tree, built on go-fuse's fs package:
//
//	features/<model>/<layer>/<prefix>.../<name>.npy   one feature tensor per image object
//	features/<model>/layers                           the model's layer table
//	predictions/<model>/<prefix>.../predictions.jsonl the top classes of the prefix's images
//	.featurefs/stats                                  JSON figures (cache, extraction, errors)
//
// # Data flow
//
// Lookups and directory listings are the namespace's (package
// fs/namespace, FUSE-free): it reads the bucket ([bucket.Bucket.List], one
// '/' level at a time, page by page), keeps the listings and decides what a
// name stands for; this package's nodes call it. A read of a feature file goes through
// the read path of package features (FUSE-free, the feature server's too):
// the negative cache, in-flight sharing, the [Cache], on a miss the
// [Extractor], whose Fetch reads the object from the bucket, and the cache
// write; prefetch and warm-up are there too. This package holds the go-fuse
// nodes that call it; nothing below it knows about FUSE. Errors become
// errnos in one place (errors.go).
//
// # Names
//
// The rule is package fs/naming's; the feature store names its objects
// through it too. Only objects whose extension is an image extension (in any ASCII case) are
// shown. Every such object is shown under exactly one name, names in a
// directory are distinct and at most 255 bytes (NAME_MAX), and a name
// depends only on the set of keys, never on how the listing was paged. An
// image object with base name B = S.ext is named:
//
//   - S.npy (its short name) if it is the only image of stem S whose
//     extension is all lower or all upper case, its own extension is so too,
//     S is not empty, no image object's base name is S (that one's long name
//     is S.npy), no directory is called S.npy, and S.npy fits;
//   - else B.npy (its long name: a.jpg.npy and a.png.npy for a.jpg and
//     a.png; a.Png.npy for a.Png; .jpg.npy for .jpg), unless a directory is
//     called B.npy or it does not fit;
//   - else the shortened name: B cut at a UTF-8 boundary to fit, "~", the
//     first 16 hex digits of the SHA-256 of B, ".npy".
//
// A directory keeps its name unless it is over 255 bytes, when it is
// shortened the same way (without .npy). A name of the shortened form
// ("~" and 16 lower-case hex digits at the end, or before .npy) is reserved:
// a directory or file whose own name has it is shortened too, so shortened
// names collide with nothing (two could only if SHA-256 prefixes of 64 bits
// did). Prefix components that are empty, "." or ".." are not shown. Each
// name other than the short one, a sibling's long name or a mixed-case
// extension's long name is logged once at WARN with the key and why.
//
// Listings are sorted by key, so every key that decides the names of stem S
// (S.<ext> in any case, the directories S.npy/ and S.<ext>.npy/) lies
// between S. and S.<largest extension>.npy/, and the image key S before
// them: an object's name is decided once a page reaching past that bound
// (or the end of the listing) has been read, remembering only the image
// keys and X.npy directories that are prefixes of the keys still to come,
// so what waits is bounded by the key length, not the directory size.
// Lookups that cannot be answered from a listing Stat the keys and list the
// prefixes that decide the name (S.<ext> in lower and upper case for each
// extension, the image key S, the directories S.npy and B.npy) and apply the
// same rule to what exists; a shortened name cannot be reversed and is
// looked up in a complete listing of its directory.
//
// Archives (fs/archive, --archives): the source lists an archive NAME.tar
// or NAME.zip as the prefix NAME.tar/, shown as the directory NAME unless
// a prefix NAME/ or another archive of that NAME is beside it (each then
// keeps its own name; a real prefix NAME.tar/, no archive, always keeps its
// name: bucket.Page.Archives tells them apart; NAME.tar/ sorts before NAME/, so it waits until the
// listing has passed NAME/, as a stem's images do); a lookup of NAME also
// lists NAME.<ext>/ for each archive extension (and, inside an archive,
// Stats NAME: a plain file). An archive's sidecar
// members (bucket.Object.Plain) are plain files of their own name
// (plainfile.go), never a name ending in .npy.
//
// Generated files (augment.jsonl in a view directory, predictions.jsonl
// under predictions/, the layers table) never hide a name from the
// bucket, by one rule (naming.Generated): where a directory shows an
// entry from the bucket of the generated file's name, the entry keeps it
// and the file is listed, after the bucket's entries, under the shortened
// form of its name (augment.jsonl~515fabe7447a63f7,
// predictions.jsonl~73a657540c708401), which no bucket name is shown
// under. A line of augment.jsonl gives a name that is not UTF-8 also as
// its bytes in base64 ("file_b64": naming.RawName).
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
// part of the feature (cache.Store.ReadAt). Extended attributes answer ENOSYS, so the kernel stops
// asking for them (ls -l asked two per file). An object
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
