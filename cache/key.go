package cache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// SchemaVersion is the version of the cache's key derivation and value
// framing. Changing it makes every existing entry unreachable (they age out
// through eviction), which is what a change of layout must do.
const SchemaVersion = 1

// IDLen is the length in bytes of a Key's ID.
const IDLen = 16

// Key names one computed feature. Every field takes part in the ID: a changed
// object (ETag), computation of the layer (digest), preprocessing or dtype
// gives a different ID, so nothing stale is ever served.
type Key struct {
	// Source is the identity of the bucket or root directory, e.g.
	// "s3://bucket/prefix" with its endpoint, or an absolute directory.
	Source string
	// Object is the object key within Source, e.g. "train/cat/img001.jpg".
	Object string
	// ETag is the object's ETag, or size+mtime where there is no ETag.
	ETag string
	// ModelDigest is the layer's digest (api.Layer.Digest: what computes
	// the layer, docs/MODELS.md); for a layer without one, and in keys
	// written before layer digests, the hex sha256 of the ONNX model bytes.
	ModelDigest string
	// Layer is empty with a layer digest (it names the layer); with the
	// model file's sha256, the layer's ONNX tensor name.
	Layer string
	// Preprocess is the preprocessing settings' canonical string
	// (extractor.Preprocess.Key()).
	Preprocess string
	// DType is the output dtype, e.g. "float32".
	DType string
}

// ArchiveIndexDigest is the ModelDigest of the entries that hold archive
// indexes (fs/archive's, which cmd/featurefs keeps in the cache), not
// features: Stats counts them apart (ArchiveIndexEntries).
const ArchiveIndexDigest = "fs/archive index"

// entryKind is what an entry holds, kept in its metadata record.
type entryKind uint8

const (
	kindFeature      entryKind = iota // a feature (every entry written before kinds)
	kindArchiveIndex                  // an archive index (or one of its parts)
)

// kind is what k's entry holds.
func (k Key) kind() entryKind {
	if k.ModelDigest == ArchiveIndexDigest {
		return kindArchiveIndex
	}
	return kindFeature
}

type id [IDLen]byte

// ID returns the key's identifier: the first 128 bits of a SHA-256 over the
// schema version and every field, each length-prefixed so that no two
// different keys share an encoding.
func (k Key) ID() []byte {
	i := k.id()
	return i[:]
}

func (k Key) id() id {
	h := sha256.New()
	var buf [binary.MaxVarintLen64]byte
	h.Write([]byte("featurefs-cache\x00"))
	h.Write(buf[:binary.PutUvarint(buf[:], SchemaVersion)])
	for _, f := range [...]string{k.Source, k.Object, k.ETag, k.ModelDigest, k.Layer, k.Preprocess, k.DType} {
		h.Write(buf[:binary.PutUvarint(buf[:], uint64(len(f)))])
		h.Write([]byte(f))
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	var out id
	copy(out[:], sum[:])
	return out
}

func (i id) String() string { return hex.EncodeToString(i[:]) }
