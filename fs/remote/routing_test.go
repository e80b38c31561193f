package remote

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// TestRendezvousIsStableAndBalanced: the first choice for a key does not
// depend on the order of the list, removing a server moves only the keys it
// had, adding one moves keys only to it, and keys spread evenly.
func TestRendezvousIsStableAndBalanced(t *testing.T) {
	urls := []string{"http://a:7070", "http://b:7070", "http://c:7070"}
	reversed := []string{urls[2], urls[1], urls[0]}
	four := append(append([]string(nil), urls...), "http://d:7070")
	const n = 6000
	count := map[string]int{}
	for i := range n {
		key := fmt.Sprintf("train/class%d/img%05d.jpg", i%10, i)
		first := urls[Rank(urls, key)[0]]
		count[first]++
		if got := reversed[Rank(reversed, key)[0]]; got != first {
			t.Fatalf("%s: %s in one order, %s in another", key, first, got)
		}
		// Remove b: only b's keys move.
		without := []string{urls[0], urls[2]}
		if moved := without[Rank(without, key)[0]]; first != urls[1] && moved != first {
			t.Fatalf("%s moved from %s to %s when b was removed", key, first, moved)
		}
		// Add d: keys move only to d.
		if got := four[Rank(four, key)[0]]; got != first && got != "http://d:7070" {
			t.Fatalf("%s moved from %s to %s when d was added", key, first, got)
		}
		if r := Rank(urls, key); len(r) != 3 || r[0] == r[1] || r[1] == r[2] || r[0] == r[2] {
			t.Fatalf("Rank %v is not a permutation", r)
		}
	}
	for _, u := range urls {
		if c := count[u]; c < n/3*85/100 || c > n/3*115/100 {
			t.Errorf("%s got %d of %d keys, want about %d", u, c, n, n/3)
		}
	}
}

// TestClientRoutesEachKeyToItsServer: with three servers, every feature
// request reaches the server Rank names, and only that one.
func TestClientRoutesEachKeyToItsServer(t *testing.T) {
	objs := map[string]string{}
	for i := range 30 {
		objs[fmt.Sprintf("r/%02d.jpg", i)] = fmt.Sprintf("r%d", i)
	}
	dir := writeObjects(t, objs)
	servers := []*testServer{startServerIn(t, dir, nil), startServerIn(t, dir, nil), startServerIn(t, dir, nil)}
	byURL := map[string]*testServer{}
	var urls []string
	for _, s := range servers {
		byURL[s.URL] = s
		urls = append(urls, s.URL)
	}
	c := dial(t, ClientConfig{URLs: urls})
	want := map[string]int64{}
	var wg sync.WaitGroup
	for k := range objs {
		want[c.Route(k)]++
		wg.Go(func() {
			if _, err := c.Extractor().Extract(context.Background(), featureReq(k, 0, "")); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for u, s := range byURL {
		if got := s.Stats().Items; got != want[u] {
			t.Errorf("%s answered %d items, %d are routed to it", u, got, want[u])
		}
		if got := s.Ex.Calls.Load(); got != want[u] {
			t.Errorf("%s extracted %d features, %d are routed to it", u, got, want[u])
		}
	}
}
