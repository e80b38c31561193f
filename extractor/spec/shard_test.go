package spec

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestParseShard(t *testing.T) {
	for in, want := range map[string]Shard{"0/1": {0, 1}, "0/3": {0, 3}, "2/3": {2, 3}, " 7/8 ": {7, 8}, "0 / 2": {0, 2}} {
		got, err := ParseShard(in)
		if err != nil || got != want {
			t.Errorf("ParseShard(%q) = %v, %v; want %v", in, got, err, want)
		}
		if p, err := ParseShard(got.String()); err != nil || p != got {
			t.Errorf("ParseShard(%q.String() = %q) = %v, %v", in, got.String(), p, err)
		}
	}
	for in, why := range map[string]string{
		"3/3": "from 0 to N-1 = 2", "4/3": "from 0 to N-1", "-1/3": "from 0 to N-1", "0/0": "at least 1", "1/-2": "at least 1",
		"1": "want K/N", "": "want K/N", "a/3": "not a number", "1/b": "not a number", "1/2/3": "not a number",
		"$(JOB_COMPLETION_INDEX)/4": "not expanded", "${JOB_COMPLETION_INDEX}/4": "not expanded",
	} {
		if s, err := ParseShard(in); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("ParseShard(%q) = %v, %v; want an error saying %q", in, s, err, why)
		}
	}
	if (Shard{}).String() != "" || (Shard{}).Split() || (Shard{0, 1}).Split() || !(Shard{1, 2}).Split() {
		t.Error("the zero Shard and 0/1 are the whole source, 1/2 a part")
	}
}

// shardHash is ShardHash written out from its definition: FNV-1a 64
// (offset basis 14695981039346656037, prime 1099511628211), then
// MurmurHash3's fmix64. ShardOf must stay this hash, whatever the library
// does.
func shardHash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// shardKeys are n object keys shaped like ImageNet's training set.
func shardKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("train/n%08d/n%08d_%d.JPEG", 1440764+i/1300*7, 1440764+i/1300*7, i%1300+10000)
	}
	return keys
}

// The shard function is deterministic (ShardHash mod N, pinned values),
// its parts are disjoint and cover every key, and they are balanced: over
// 100,000 ImageNet-shaped keys every part of a 2- to 16-way split is
// within 3% of the mean (a binomial's standard deviation is under 0.9%
// of it for N <= 16).
func TestShardOfIsStableDisjointCoveringBalanced(t *testing.T) {
	for key, want := range map[string]uint64{"": 17280346270528514342, "b": 7955382828454826704,
		"train/cat/img003.jpg": 17707701952735569045, "shards/000001.tar": 16073729846970657935} {
		if got := ShardHash(key); got != want || got != shardHash(key) {
			t.Errorf("ShardHash(%q) = %d, want %d", key, got, want)
		}
		if got := ShardOf(key, 3); uint64(got) != want%3 {
			t.Errorf("ShardOf(%q, 3) = %d, want %d", key, got, want%3)
		}
	}
	keys := shardKeys(100_000)
	for _, n := range []int{1, 2, 3, 4, 5, 8, 16} {
		counts := make([]int, n)
		for _, k := range keys {
			if uint64(ShardOf(k, n)) != shardHash(k)%uint64(n) {
				t.Fatalf("ShardOf(%q, %d) is not ShardHash mod N", k, n)
			}
			owners := 0
			for i := range n {
				if (Shard{Index: i, Count: n}).Owns(k) {
					owners++
					counts[i]++
				}
			}
			if owners != 1 {
				t.Fatalf("%q is owned by %d of %d parts, want exactly 1", k, owners, n)
			}
		}
		mean := float64(len(keys)) / float64(n)
		worst := 0.0
		for _, c := range counts {
			worst = math.Max(worst, math.Abs(float64(c)-mean)/mean)
		}
		t.Logf("%d parts of %d keys: %v, the furthest %.2f%% from the mean", n, len(keys), counts, 100*worst)
		if worst > 0.03 {
			t.Errorf("%d parts: %v, one %.1f%% from the mean %.0f, want within 3%%", n, counts, 100*worst, mean)
		}
	}
}

// Keys that differ only in a byte's high bits (here a letter's case) are
// spread like any others: FNV-1a alone keeps them in one part mod a power
// of two, as its low bits depend only on the low bits of each byte.
func TestShardOfSpreadsKeysDifferingInHighBits(t *testing.T) {
	same, pairs := 0, 0
	for i := range 200 {
		for c := 'a'; c <= 'z'; c++ {
			lower := fmt.Sprintf("train/%03d/%c.jpg", i, c)
			upper := fmt.Sprintf("train/%03d/%c.jpg", i, c-'a'+'A')
			pairs++
			if ShardOf(lower, 8) == ShardOf(upper, 8) {
				same++
			}
		}
	}
	// Random parts would put 1/8 of the pairs together.
	if frac := float64(same) / float64(pairs); frac > 0.2 {
		t.Errorf("%d of %d pairs of keys differing only in case share their part of 8 (%.0f%%), want about 1/8", same, pairs, 100*frac)
	}
}
