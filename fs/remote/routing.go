package remote

// Routing: each object key goes to one server by rendezvous hashing, and a
// listing or stat falls over to the next server in the key's rank.

import (
	"errors"
	"hash/fnv"
	"sort"
)

// Route returns the server that key is routed to.
func (c *Client) Route(key string) string { return c.route(key).url }

// route returns the server key is routed to: the first in its rank.
func (c *Client) route(key string) *server { return c.servers[Rank(c.cfg.URLs, key)[0]] }

// Rank orders servers for key by rendezvous (highest random weight)
// hashing: the indexes of urls by decreasing score(url, key), ties by URL.
// Removing a server moves only the keys that ranked it first.
func Rank(urls []string, key string) []int {
	idx := make([]int, len(urls))
	score := make([]uint64, len(urls))
	for i, u := range urls {
		idx[i] = i
		score[i] = hrwScore(u, key)
	}
	sort.Slice(idx, func(a, b int) bool {
		i, j := idx[a], idx[b]
		if score[i] != score[j] {
			return score[i] > score[j]
		}
		return urls[i] < urls[j]
	})
	return idx
}

// hrwScore is splitmix64's finalizer over FNV-1a-64(url "\x00" key).
func hrwScore(u, key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(u))
	h.Write([]byte{0})
	h.Write([]byte(key))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// failover reports whether an error from one server means the next one
// should be tried: it did not answer, or answered that it could not.
func failover(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrServerTimeout)
}
