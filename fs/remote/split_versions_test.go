package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/extractor/split"
)

// versionedLocal is a split mount's local extractor whose model file can
// be replaced (the previous version kept, as extractor.Service does). The
// second half of a split writes the server's layer's mark (the last
// element of the tensor it got) into the first element and its own
// version's layer digest's first byte into the last: a feature whose two
// halves are different versions is told apart.
type versionedLocal struct {
	*versionedExtractor
	lmu   sync.Mutex
	tails int // ExtractFromVersion calls
	gone  bool
}

func (l *versionedLocal) Profile(ctx context.Context, model string, opts api.ProfileOptions) (*split.Profile, error) {
	return nil, errors.New("not measured")
}

func (l *versionedLocal) ExtractFromVersion(ctx context.Context, model, digest string, from, to int, npy []byte) ([]byte, error) {
	l.mu.Lock()
	m := l.cur
	switch {
	case l.gone:
		m = nil
	case digest == "" || digest == l.cur.Digest:
	case l.prev != nil && digest == l.prev.Digest:
		m = l.prev
	default:
		m = nil
	}
	l.mu.Unlock()
	if m == nil {
		return nil, fmt.Errorf("extract from: %w", api.ErrModelReplaced)
	}
	l.lmu.Lock()
	l.tails++
	l.lmu.Unlock()
	_, _, f, err := api.DecodeNPY(npy)
	if err != nil {
		return nil, err
	}
	f[0] = f[len(f)-1]
	f[len(f)-1] = float32(m.Layers[to].Digest[0])
	return api.EncodeNPY(fakeShape, f, api.Float32), nil
}

func (l *versionedLocal) tailCalls() int {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	return l.tails
}

// fixedPlanner plans split layer 0 for every freeze layer of a two-layer
// model (policy --split 0).
func fixedPlanner(t *testing.T, policy string) *split.Planner {
	t.Helper()
	prof := func(host string) *split.Profile {
		p := &split.Profile{Model: "tiny", Digest: "v1", Device: "cpu", Host: host, Batch: 1}
		cum := 0.0
		for i := range 2 {
			cum += 0.01
			p.Layers = append(p.Layers, split.LayerProfile{Index: i, Bytes: 32, Seconds: 0.01, CumSeconds: cum})
		}
		return p
	}
	cm, err := split.NewCostModel(prof("s"), prof("c"))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := spec.ParseSplitPolicy(policy)
	if err != nil {
		t.Fatal(err)
	}
	p, err := split.NewPlanner(cm, pol, 1e6)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// splitOver returns split execution over c with local as the mount's
// model and a fixed plan, as Split would build it.
func splitOver(t *testing.T, c *Client, local LocalExtractor, policy string, log *slog.Logger) *SplitExtractor {
	x := &SplitExtractor{c: c, inner: c.Extractor(), local: local, log: log, planners: map[string]*split.Planner{"tiny": fixedPlanner(t, policy)},
		warned: map[string]string{}, rawSem: make(chan struct{}, 1), maxRaw: 1 << 20}
	x.owner = c.owner.Child()
	t.Cleanup(func() { x.Close() })
	return x
}

// A split mount never returns a feature whose two halves are different
// versions: a layer whose digest differs between the mount's model file
// and the servers' version the read is for is computed whole by the
// servers (one WARN line naming both digests); once both sides hold the
// same version the layer is split again; a local version gone mid-read
// falls back to the servers too.
func TestSplitNeverMixesVersions(t *testing.T) {
	vx := newVersionedExtractor(tinyVersion("v1", 'a', 'b'))
	ts := startServer(t, map[string]string{"a.jpg": "x"}, func(c *testConfig) { c.Extractor = vx })
	c := dial(t, ClientConfig{URLs: []string{ts.URL}})
	local := &versionedLocal{versionedExtractor: newVersionedExtractor(tinyVersion("v1", 'a', 'b'))}
	var logs bytes.Buffer
	var logMu sync.Mutex
	x := splitOver(t, c, local, "0", slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil)))

	// read returns the feature's marks: the server's layer0 mark (0 when
	// the servers computed it whole) and layer1's digest byte; and whether
	// the mount computed part of it.
	read := func(digest string) (head, tail byte, split bool) {
		t.Helper()
		before := local.tailCalls()
		req := featureReq("a.jpg", 1, "")
		req.Digest = digest
		req.Fetch = nil
		data, err := x.Extract(context.Background(), req)
		if err != nil {
			t.Fatalf("read for %q: %v", digest, err)
		}
		_, _, f, err := api.DecodeNPY(data)
		if err != nil {
			t.Fatal(err)
		}
		split = local.tailCalls() > before
		if split {
			head = byte(f[0])
		}
		return head, byte(f[len(f)-1]), split
	}
	check := func(what, digest string, wantTail byte, wantSplit bool) {
		t.Helper()
		head, tail, split := read(digest)
		if tail != wantTail {
			t.Errorf("%s: layer1 of the version with digest %c..., want %c... (a mixed or wrong version)", what, tail, wantTail)
		}
		if split && head != 'a' {
			t.Errorf("%s: the server's half is layer0 %c..., want a...", what, head)
		}
		if split != wantSplit {
			t.Errorf("%s: split %v, want %v", what, split, wantSplit)
		}
	}

	check("both sides v1", "v1", 'b', true)

	// The mount's file is replaced first: layer1 differs (b on the
	// servers, c here), so the servers compute it whole.
	local.replace(tinyVersion("v2", 'a', 'c'))
	check("local v2, servers v1", "v1", 'b', false)
	check("local v2, servers v1, no digest", "", 'b', false)
	logMu.Lock()
	warn := logs.String()
	logMu.Unlock()
	if n := strings.Count(warn, "servers compute it whole"); n != 1 || !strings.Contains(warn, "local_digest=v2") || !strings.Contains(warn, "servers_digest=v1") {
		t.Errorf("want one WARN line naming both digests, got %d in:\n%s", n, warn)
	}

	// The servers follow: a read made for v2 is split again; one made for
	// v1 (a tree not yet told) is the servers' v1, whole.
	vx.replace(tinyVersion("v2", 'a', 'c'))
	ts.ModelsChanged()
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	check("both sides v2", "v2", 'c', true)
	check("a v1 read, local v2", "v1", 'b', false)

	// Another file whose layer1 is the same computation: split.
	vx.replace(tinyVersion("v3", 'a', 'c'))
	ts.ModelsChanged()
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	check("servers v3, local v2, layer1 the same", "v3", 'c', true)

	// The local version goes away during the read: the servers compute it.
	local.mu.Lock()
	local.gone = true
	local.mu.Unlock()
	check("local version gone mid-read", "v3", 'c', false)
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Split raw (the mount computes it all from the image) follows the same
// rule: the local version must have the layer's digest of the servers'
// version the read is for, and the local extraction is pinned to it.
func TestSplitRawNeverMixesVersions(t *testing.T) {
	vx := newVersionedExtractor(tinyVersion("v1", 'a', 'b'))
	ts := startServer(t, map[string]string{"a.jpg": "x"}, func(c *testConfig) { c.Extractor = vx })
	c := dial(t, ClientConfig{URLs: []string{ts.URL}})
	local := &versionedLocal{versionedExtractor: newVersionedExtractor(tinyVersion("v1", 'a', 'b'))}
	x := splitOver(t, c, local, "raw", slog.New(slog.DiscardHandler))
	read := func(digest string) (byte, int) {
		t.Helper()
		req := featureReq("a.jpg", 1, "")
		req.Digest = digest
		req.Fetch = nil
		data, err := x.Extract(context.Background(), req)
		if err != nil {
			t.Fatalf("read for %q: %v", digest, err)
		}
		_, _, f, err := api.DecodeNPY(data)
		if err != nil {
			t.Fatal(err)
		}
		local.mu.Lock()
		defer local.mu.Unlock()
		return byte(f[len(f)-1]), local.calls[strings.Repeat("b", 64)] + local.calls[strings.Repeat("c", 64)]
	}
	if got, n := read("v1"); got != 'b' || n != 1 {
		t.Errorf("both sides v1: layer1 %c..., %d local extractions; want b..., 1", got, n)
	}
	local.replace(tinyVersion("v2", 'a', 'c'))
	if got, n := read("v1"); got != 'b' || n != 1 {
		t.Errorf("local v2, servers v1: layer1 %c..., %d local extractions; want b... from the servers, still 1", got, n)
	}
	vx.replace(tinyVersion("v2", 'a', 'c'))
	ts.ModelsChanged()
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, n := read("v2"); got != 'c' || n != 2 {
		t.Errorf("both sides v2: layer1 %c..., %d local extractions; want c..., 2", got, n)
	}
}
