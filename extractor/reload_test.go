package extractor

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// copyFile writes src's bytes to dst by a rename, as a deployment would.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst+".tmp", b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst+".tmp", dst); err != nil {
		t.Fatal(err)
	}
}

// Reload replaces a model whose file changed: new requests use the new
// version, a request made for the old version (Request.Digest) still gets
// the old version's feature, the layer digests follow the computation, and
// a file that does not load or does not fit the running tree is refused
// while the current version keeps serving.
func TestReloadReplacesTheModel(t *testing.T) {
	versions := testenv.ModelVersions(t)
	path := filepath.Join(t.TempDir(), "r.onnx")
	copyFile(t, filepath.Join(versions, "base.onnx"), path)
	svc := newCPUService(t, nil, ModelSpec{Name: "r", Path: path})
	ctx := context.Background()
	img := testJPEG(t, 64, 48)
	old, _ := svc.Model("r")
	extract := func(digest string) []byte {
		t.Helper()
		b, err := svc.Extract(ctx, Request{Model: "r", Layer: 19, Key: "a.jpg", Fetch: fetchOf(img), Digest: digest})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	before := extract("")

	if _, changed, err := svc.Reload("r"); err != nil || changed {
		t.Fatalf("reload of the same file: changed %v, %v", changed, err)
	}
	copyFile(t, filepath.Join(versions, "layer4fc.onnx"), path)
	nm, changed, err := svc.Reload("r")
	if err != nil || !changed {
		t.Fatalf("reload: changed %v, %v", changed, err)
	}
	if cur, _ := svc.Model("r"); cur != nm || nm.Digest == old.Digest || svc.Versions()[0].Digest != nm.Digest {
		t.Errorf("after reload the model is not the new version")
	}
	// LoadedAt (GET /v1/models' loaded_at on a feature server) tells the
	// current version's load time, and nothing for the replaced one.
	if at, ok := svc.LoadedAt("r", nm.Digest); !ok || !at.Equal(svc.Versions()[0].Loaded) || at.IsZero() {
		t.Errorf("LoadedAt of the new version: %v, %v; want its load time %v", at, ok, svc.Versions()[0].Loaded)
	}
	if _, ok := svc.LoadedAt("r", old.Digest); ok {
		t.Error("LoadedAt answers for the replaced version's digest")
	}
	for i, l := range nm.Layers {
		if (l.Digest == old.Layers[i].Digest) != (i < 15) {
			t.Errorf("%s keeps its digest: %v", l.Name, l.Digest == old.Layers[i].Digest)
		}
	}
	if bytes.Equal(extract(""), before) {
		t.Error("a new request got the old version's feature")
	}
	if !bytes.Equal(extract(old.Digest), before) {
		t.Error("a request made for the old version did not get its feature")
	}

	for what, write := range map[string]func(){
		"garbage":     func() { os.WriteFile(path, []byte("not onnx"), 0o644) },
		"other shape": func() { copyFile(t, testenv.OddModel(t, "tiny"), path) },
	} {
		write()
		if _, _, err := svc.Reload("r"); !errors.Is(err, ErrReloadRefused) {
			t.Errorf("%s: %v, want ErrReloadRefused", what, err)
		}
		if cur, _ := svc.Model("r"); cur.Digest != nm.Digest {
			t.Errorf("%s: the model changed", what)
		}
	}
	extract("") // still serves
}

// A reload keeps the lanes and sessions of the layers whose digest it
// leaves as it was: the first request of such a layer after the reload
// opens no session (and measures no batch size, which is the lane's).
// The lanes and idle sessions of a version the service no longer holds
// are dropped, so reloads do not pile up lanes that keep old versions
// alive.
func TestReloadKeepsUnchangedLayersSessions(t *testing.T) {
	versions := testenv.ModelVersions(t)
	path := filepath.Join(t.TempDir(), "r.onnx")
	copyFile(t, filepath.Join(versions, "base.onnx"), path)
	svc := newCPUService(t, nil, ModelSpec{Name: "r", Path: path})
	ctx := context.Background()
	img := testJPEG(t, 64, 48)
	extract := func(layer int) {
		t.Helper()
		if _, err := svc.Extract(ctx, Request{Model: "r", Layer: layer, Key: "a.jpg", Fetch: fetchOf(img)}); err != nil {
			t.Fatal(err)
		}
	}
	created := func() int64 {
		_, c, _ := svc.pool.stats()
		return c
	}
	lanes := func() map[sessionKey]*lane {
		svc.sched.mu.Lock()
		defer svc.sched.mu.Unlock()
		out := map[sessionKey]*lane{}
		for k, ln := range svc.sched.lanes {
			out[k] = ln
		}
		return out
	}
	base := svc.reg.Load().models["r"]
	extract(4)
	extract(15)
	before, lanesBefore := created(), lanes()
	if len(lanesBefore) != 2 {
		t.Fatalf("%d lanes after two layers, want 2", len(lanesBefore))
	}

	copyFile(t, filepath.Join(versions, "layer4fc.onnx"), path)
	if _, changed, err := svc.Reload("r"); err != nil || !changed {
		t.Fatalf("reload: changed %v, %v", changed, err)
	}
	extract(4)
	if got := created(); got != before {
		t.Errorf("layer4 (digest unchanged) opened %d sessions after the reload, want 0", got-before)
	}
	k4 := segment{m: svc.reg.Load().models["r"], l: base.Layers[4]}.key()
	if ln := lanes()[k4]; ln == nil || ln != lanesBefore[k4] || ln.g().m != svc.reg.Load().models["r"] {
		t.Errorf("layer4's lane was not kept, or does not run on the current version")
	}
	extract(15)
	if got := created(); got != before+1 {
		t.Errorf("layer15 (digest changed) opened %d sessions after the reload, want 1", got-before)
	}

	// A third version: the first one is held no more, nor its layer15.
	copyFile(t, filepath.Join(versions, "bn-layer2.onnx"), path)
	if _, changed, err := svc.Reload("r"); err != nil || !changed {
		t.Fatalf("second reload: changed %v, %v", changed, err)
	}
	k15 := segment{m: base, l: base.Layers[15]}.key()
	if _, ok := lanes()[k15]; ok {
		t.Error("the lane of a version no longer held was kept")
	}
	svc.pool.mu.Lock()
	_, ok := svc.pool.entries[k15]
	svc.pool.mu.Unlock()
	if ok {
		t.Error("the idle session of a version no longer held was kept")
	}
	extract(4) // bn-layer2 changes layer5 onward: layer4 goes on
	extract(15)
	if got := created(); got != before+2 {
		t.Errorf("%d sessions opened after two reloads, want 2 (layer15 twice)", got-before)
	}
}

// Reloads keep no replaced version in memory but the previous one (each
// holds its file and parsed graph: 100 MB for ResNet-50), even while a
// lane of an unchanged layer has not been asked for since and a caller
// still holds an old version's description (Service.Model): a mount's
// kernel nodes keep theirs.
func TestReloadKeepsNoReplacedVersion(t *testing.T) {
	versions := testenv.ModelVersions(t)
	path := filepath.Join(t.TempDir(), "r.onnx")
	copyFile(t, filepath.Join(versions, "base.onnx"), path)
	svc := newCPUService(t, nil, ModelSpec{Name: "r", Path: path})
	var mu sync.Mutex
	alive := map[uint64]bool{}
	track := func() {
		m := svc.reg.Load().models["r"]
		mu.Lock()
		alive[m.gen] = true
		mu.Unlock()
		runtime.AddCleanup(m, func(g uint64) {
			mu.Lock()
			delete(alive, g)
			mu.Unlock()
		}, m.gen)
	}
	track()
	first, _ := svc.Model("r") // held to the end, as a kernel node holds its version's
	ctx := context.Background()
	img := testJPEG(t, 64, 48)
	for i := range 4 {
		for _, l := range []int{4, 15} {
			if _, err := svc.Extract(ctx, Request{Model: "r", Layer: l, Key: "a.jpg", Fetch: fetchOf(img)}); err != nil {
				t.Fatal(err)
			}
		}
		src := "layer4fc.onnx"
		if i%2 == 1 {
			src = "base.onnx"
		}
		copyFile(t, filepath.Join(versions, src), path)
		if _, _, err := svc.Reload("r"); err != nil {
			t.Fatal(err)
		}
		track()
	}
	reg := svc.reg.Load()
	want := map[uint64]bool{reg.models["r"].gen: true, reg.prev["r"].gen: true}
	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		mu.Lock()
		got := maps.Clone(alive)
		mu.Unlock()
		if maps.Equal(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("versions alive after 4 reloads: %v, want only the current and the previous %v", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	runtime.KeepAlive(first)
}
