// Package cache is featurefs's persistent store of computed features.
//
// Features are the expensive thing featurefs makes; this store is what lets a
// second epoch run at local-disk speed. In the data flow the fs layer asks the
// cache first and, on a miss, asks the extractor and then Puts the result
// here. The package knows nothing of FUSE or ONNX: it maps a Key (source
// identity including the ETag, model digest, layer tensor name, preprocessing
// settings, dtype and a schema version) to opaque bytes, normally a whole .npy
// file of 4 KiB to 4 MiB.
//
// # Storage
//
// Entries live in an embedded Badger (v4) database in Options.Dir. A value
// whose record is at least Options.FileThreshold bytes (64 KiB by default: a
// layer12 feature is 803 KB) is written with write(2) to a file of its own,
// Dir/files/XX/ID (0600, created O_EXCL|O_NOFOLLOW under a temporary name,
// renamed into place, then indexed), and Badger holds a small pointer to it;
// smaller values go to Badger's value log (a low ValueThreshold, no
// compression, one version per key). Writers of different keys write their
// files at once; Badger's one writer goroutine only commits the index
// entries. See files.go and docs/CACHE.md. Every value is framed with a CRC-32C per 64 KiB chunk (over the key
// ID, the chunk's index and its bytes) and one over the header and that
// table, verified on every read: Get verifies every chunk, ReadAt only the
// chunks it copies (a file's pages read again after the kernel dropped
// them). Values written before the chunks, with one CRC over the key ID and
// the bytes, are still read and verified whole. A mismatch is reported as a
// miss, the entry is deleted, counted in Stats.ChecksumFailures and logged
// once.
//
// Next to each value the store keeps a small metadata record (size and an
// access sequence number) written in the same transaction, so a restart knows
// every entry's size and approximate recency by iterating only those small
// records, never the values.
//
// # Compression
//
// Options.Compression compresses values with cache/codec. Under
// Options.RawFiles (the mount's --cache-compression auto; compact.go) it
// applies to the small values only, and a large value is compressed with
// zeros-elision on the write path where the codec's CPU, measured on this
// host, is at most 5% of the extraction time of a feature the caller
// reports (SetWorkload), else written raw; raw files are compacted at
// rest by one goroutine once the store has seen no work for
// Options.CompactAfter, as a Put of the same key would write them, under
// an intent record that Open resolves after a crash.
//
// # Budget and eviction
//
// Badger has no size bound, so the store counts bytes itself (Stats.Bytes is
// the sum of stored value lengths) and evicts least-recently-used entries when
// a Put takes it over Options.MaxBytes. Entries being read by a Get are pinned
// and never evicted. A background goroutine retries evictions that pinned
// entries postponed, persists access order lazily (batched, so reads stay
// cheap), and reclaims disk space: after enough evicted bytes (one value-log
// file or an eighth of the budget) or five minutes after an eviction, it
// forces the LSM tree to flush and compact (so Badger learns which value-log
// bytes are dead) and runs value-log GC until nothing is left to rewrite.
// Value-log files are sized from the budget (an eighth, at least what the
// largest value accepted needs), since GC never collects the active one.
//
// # Durability and locking
//
// Writes are not fsynced by default (Options.SyncWrites). A kill -9 loses
// nothing whose Put returned: Badger's logs are memory-mapped, so the bytes
// are in the page cache when Put returns. A power loss or kernel crash can
// lose the most recent unsynced Puts; torn values are never served, because
// Badger discards incomplete transactions on replay and the checksum catches
// anything else. (On open, Badger truncates its newest value-log file at the
// first damaged record, so damage there also loses the values written after
// it; their reads come back empty from Badger, which the checksum turns into
// misses.) A feature file is written (and with SyncWrites fsynced, with its
// directory) before its index entry, so a kill -9 or power loss leaves a file
// without entry (removed at the next open) rather than an entry without
// file; an entry whose file is missing, not a regular file, or of another
// length (at its open, or later: files are read with pread, never mapped,
// so one truncated under an open descriptor reads short) is a miss.
// Anything planted in the directory is opened without blocking or
// following a link (safeopen.go; docs/CACHE.md, "Files changed behind the
// store's back").
// Evicting a file-stored value unlinks its file after deleting its entry:
// its disk space is free at once. A second process opening the same directory fails at once
// with an error matching ErrLocked that names the directory.
//
// # Memory
//
// The in-memory index costs about 41 bytes per entry (a 32-byte slot in a
// doubly linked LRU list plus an open-addressing hash table of int32;
// measured by TestIndexMemoryPerEntry), so a million cached features need
// about 41 MB.
package cache
