package spec

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// Shard is one of Count disjoint parts of a source's objects: the part
// numbered Index, 0 <= Index < Count (featurefs warm --shard K/N). The
// zero Shard (Count 0) is the whole source.
//
// A shard unit (an object key for a loose object; for an archive's
// members the archive's key, so that an archive is warmed whole) belongs
// to part ShardHash(unit) mod Count (ShardOf): the same part on every
// host and every run, with nothing to coordinate, so N processes given
// 0/N .. N-1/N fill one feature store with no overlap and together cover
// it.
type Shard struct {
	Index, Count int
}

// ParseShard parses "K/N" (e.g. "2/8"; Kubernetes' Indexed Job gives K
// as $(JOB_COMPLETION_INDEX)). It wants integers with 0 <= K < N.
func ParseShard(s string) (Shard, error) {
	k, n, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Shard{}, fmt.Errorf("want K/N (part K of N, 0 <= K < N), e.g. 0/4")
	}
	ki, err := strconv.Atoi(strings.TrimSpace(k))
	if err != nil {
		if strings.Contains(k, "$") {
			return Shard{}, fmt.Errorf("K %q is not a number: an environment variable was not expanded (in a Kubernetes Indexed Job, write $(JOB_COMPLETION_INDEX) in the container's args)", k)
		}
		return Shard{}, fmt.Errorf("K %q is not a number: want K/N, e.g. 0/4", k)
	}
	ni, err := strconv.Atoi(strings.TrimSpace(n))
	if err != nil {
		return Shard{}, fmt.Errorf("N %q is not a number: want K/N, e.g. 0/4", n)
	}
	switch {
	case ni < 1:
		return Shard{}, fmt.Errorf("N %d: must be at least 1", ni)
	case ki < 0 || ki >= ni:
		return Shard{}, fmt.Errorf("K %d: must be from 0 to N-1 = %d (parts are numbered from 0, as JOB_COMPLETION_INDEX is)", ki, ni-1)
	}
	return Shard{Index: ki, Count: ni}, nil
}

// String is "K/N", or "" for the whole source.
func (s Shard) String() string {
	if s.Count == 0 {
		return ""
	}
	return fmt.Sprintf("%d/%d", s.Index, s.Count)
}

// Split reports whether s is a part smaller than the whole (N > 1).
func (s Shard) Split() bool { return s.Count > 1 }

// Owns reports whether the shard unit unit is in part s. The whole
// source (Count 0 or 1) owns every unit.
func (s Shard) Owns(unit string) bool {
	if s.Count <= 1 {
		return true
	}
	return ShardOf(unit, s.Count) == s.Index
}

// ShardOf is the part, of n, that shard unit unit belongs to:
// ShardHash(unit) mod n. It must never change: hosts of different
// versions filling one store would overlap and leave gaps.
func ShardOf(unit string, n int) int {
	if n <= 1 {
		return 0
	}
	return int(ShardHash(unit) % uint64(n))
}

// ShardHash is the FNV-1a 64-bit hash of unit's bytes, finished with
// MurmurHash3's 64-bit finalizer (fmix64). FNV-1a's low bits depend only
// on the low bits of each byte, so on its own mod a power of two it
// would put keys that differ only in a byte's high bits (a and A, 0 and
// 8 mod 8) in one part; the finalizer mixes every bit into every other.
func ShardHash(unit string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(unit))
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}
