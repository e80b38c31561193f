// Package archive presents packed archives in a bucket as prefixes: an
// object NAME.tar (uncompressed tar) or NAME.zip (stored or deflated
// members) is listed as the prefix "NAME.tar/", and its members as
// objects "NAME.tar/<member path>" whose ETag is the archive's ETag and a
// digest of the member path. The rest of the stack (the namespace, the
// read path, the cache key, the feature store's names and the remote
// protocol) sees ordinary keys; fs/naming shows the prefix as NAME/.
//
// Image members are listed as objects; other members whose sample key
// (the base name up to its first dot) is an image's in the same directory
// (WebDataset's key.cls, key.json, key.txt) are listed with
// bucket.Object.Plain set, and the tree shows them as plain files. Other
// members are left out.
//
// Reads: an archive's index (member path, offset, size) is read once, from
// the zip central directory (one ranged GET of the tail, a second when the
// directory is larger) or by walking the tar headers (ranged GETs from
// BlockSize growing to MaxBlockSize), and kept in an LRU bounded by
// Config.MaxIndexBytes, beside which one larger index is kept up to
// Config.MaxLargeIndexBytes (indexcache.go: one WARN line per archive
// version kept so, or too large to keep; a mount counts Stats.IndexBytes in
// its metadata budget), and in an IndexStore when one is set (persist.go:
// the feature cache, as a head and parts of at most 4 MiB, so a remount
// reads no archive to list it). A member read is one ranged GET of its bytes (a
// deflated member: of its compressed bytes, inflated up to its declared
// size), or, once the archive's reads follow each other, a read through
// ChunkSize read-ahead chunks (readahead.go). A walk of a whole archive
// (warm, prefetch) reads it once, in one streaming GET, its members in
// offset order (Stream, stream.go; a tar's index built in the same pass
// when none is kept). Every read checks the archive's ETag; an archive
// that changed is indexed again. A listing of an archive's directory (its
// first page) first asks the store for the archive's version (one Stat,
// when an index is kept): a replaced archive's directory, listed again,
// lists its members with the new archive's ETags, as a replaced object's
// prefix lists its new ETag, even when its parent was not listed again. Index reads and read-ahead chunk reads
// are one-flight (fs/internal/inflight) under the Bucket's lifetime.Owner,
// which Close ends.
//
// Bad archives fail alone: a truncated archive, a member past the end, an
// absurd size, an absolute or ".." member path, an encrypted member,
// a multi-disk archive or a deflated member of over 1 MiB whose declared size is over
// MaxRatio times its compressed size (a zip bomb) fail for that archive or member only,
// with one log line per archive naming its key.
package archive
