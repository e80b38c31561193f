package test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/remote"
)

// hostileServer is a fake feature server on 127.0.0.1 that lies (issue
// 24, section 3): its /v1/models lists the model "huge" of layer shape
// [2^20, 2^20, 2^10] (4 PB per sample) beside "good" ([4, 8]) and "liar"
// ([16]); it answers good's items honestly, and every other item with a
// frame declaring data_len = 2^40 followed by a few bytes.
type hostileServer struct {
	*httptest.Server
	lies atomic.Int64 // lying frames sent
}

// hostileGoodShape is the shape of the hostile server's good model.
var hostileGoodShape = []int64{4, 8}

// hostileFeature is the good model's feature of key: values from the key.
func hostileFeature(key string) []byte {
	v := make([]float32, 32)
	for i := range v {
		v[i] = float32(len(key)*100 + i)
	}
	return api.EncodeNPY(hostileGoodShape, v, extractor.Float32)
}

func startHostileServer(t *testing.T) *hostileServer {
	t.Helper()
	p := extractor.DefaultPreprocess()
	model := func(name string, shape []int64) remote.ModelInfo {
		return remote.ModelInfo{Name: name, Digest: "digest-" + name, Preprocess: p, PreprocessKey: p.Key(), Table: name + " table\n",
			Layers: []remote.LayerInfo{{Index: 0, Name: "layer0", Tensor: "t0", Shape: shape}}}
	}
	models, err := json.Marshal(remote.ModelsResponse{Protocol: remote.ProtocolVersion, Source: "hostile", DType: extractor.Float32, Device: "cpu",
		Limits: remote.Limits{MaxBatchItems: 64}, Models: []remote.ModelInfo{
			model("good", hostileGoodShape), model("huge", []int64{1 << 20, 1 << 20, 1 << 10}), model("liar", []int64{16})}})
	if err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	objects := []remote.ObjectInfo{{Key: "a.jpg", Size: 1000, ETag: "ea", ModTime: mtime}, {Key: "b.jpg", Size: 1000, ETag: "eb", ModTime: mtime}}
	s := &hostileServer{}
	mux := http.NewServeMux()
	writeJSON := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(models)
	})
	mux.HandleFunc("GET /v1/list", func(w http.ResponseWriter, r *http.Request) {
		resp := remote.ListResponse{Prefixes: []string{}, Objects: []remote.ObjectInfo{}}
		if r.URL.Query().Get("prefix") == "" {
			resp.Objects = objects
		}
		writeJSON(w, resp)
	})
	mux.HandleFunc("GET /v1/stat", func(w http.ResponseWriter, r *http.Request) {
		for _, o := range objects {
			if o.Key == r.URL.Query().Get("key") {
				writeJSON(w, o)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		writeJSON(w, remote.ErrorResponse{Error: "no such key", Status: http.StatusNotFound})
	})
	mux.HandleFunc("POST /v1/batch", func(w http.ResponseWriter, r *http.Request) {
		var req remote.BatchRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", remote.BatchContentType)
		w.Write(append([]byte("FFB1"), binary.LittleEndian.AppendUint32(nil, uint32(len(req.Items)))...))
		lying := -1
		for i, it := range req.Items {
			if it.Model != "good" {
				lying = i
				continue
			}
			remote.WriteFrame(w, remote.Frame{Index: uint32(i), Status: remote.StatusOK, Data: hostileFeature(it.Key)})
		}
		if lying >= 0 {
			var h [20]byte
			binary.LittleEndian.PutUint32(h[0:], uint32(lying))
			binary.LittleEndian.PutUint16(h[4:], remote.StatusOK)
			binary.LittleEndian.PutUint64(h[12:], 1<<40)
			w.Write(h[:])
			w.Write(bytes.Repeat([]byte{1}, 4096))
			s.lies.Add(1)
		}
		w.(http.Flusher).Flush()
		select { // hold the connection as a slow liar would
		case <-r.Context().Done():
		case <-time.After(3 * time.Second):
		}
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// TestRemoteMountHostileServer: a kernel mount of a server that declares a
// [2^20, 2^20, 2^10] layer and sends a 2^40-byte frame (issue 24, section
// 3; the mount used to die with "fatal error: runtime: out of memory")
// refuses that model (not listed, one log line), fails the lying model's
// reads with EIO, stays up with a modest RSS, and serves the good model's
// features byte for byte before and after.
func TestRemoteMountHostileServer(t *testing.T) {
	s := startHostileServer(t)
	m := testMount(t, mountConfig{Args: []string{"--remote", s.URL, "--prefetch", "off", "--remote-timeout", "5s"}, NoModel: true})

	good := func(key, name string) {
		t.Helper()
		got, err := os.ReadFile(m.Path("features", "good", "layer0", name))
		if err != nil || !bytes.Equal(got, hostileFeature(key)) {
			t.Errorf("good model's %s: %d bytes, %v; want its %d-byte feature", name, len(got), err, len(hostileFeature(key)))
		}
	}
	good("a.jpg", "a.npy")

	ents, err := os.ReadDir(m.Path("features"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "good,liar" {
		t.Errorf("features/ lists %q, want good and liar (huge refused)", names)
	}
	if _, err := os.Stat(m.Path("features", "huge", "layer0", "a.npy")); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("stat of the refused model's file: %v, want ENOENT", err)
	}

	start := time.Now()
	for _, name := range []string{"a.npy", "b.npy"} {
		_, err := os.ReadFile(m.Path("features", "liar", "layer0", name))
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("liar's %s (a 2^40-byte frame): %v, want EIO", name, err)
		}
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the lying frames took %v to fail", took)
	}
	if s.lies.Load() == 0 {
		t.Fatal("the server sent no lying frame: the test tested nothing")
	}

	select {
	case <-m.exited:
		t.Fatalf("the mount exited (%v)", m.waitErr)
	default:
	}
	if !isMounted(t, m.Dir) {
		t.Fatal("no longer mounted")
	}
	good("b.jpg", "b.npy")
	hwm := rssBytes(t, m.PID(), "VmHWM")
	t.Logf("mount peak RSS %s after %d lying frames", mib(hwm), s.lies.Load())
	if hwm > 256<<20 {
		t.Errorf("mount peak RSS %s, want under 256 MiB", mib(hwm))
	}

	logText, _ := os.ReadFile(m.Log)
	if n := strings.Count(string(logText), "model refused"); n != 1 || !strings.Contains(string(logText), "huge") {
		t.Errorf("%d log lines refuse a model, want 1 naming huge", n)
	}
}
