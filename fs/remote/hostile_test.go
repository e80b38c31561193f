package remote

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/cache/codec"
	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/test/testenv"
)

// A server's numbers are not trusted (limits.go): these tests play a
// hostile or broken server through a fake transport (no socket) and check
// that what it declares past the client's caps is refused, that a frame's
// lengths buy no memory before its bytes arrive, and that the good parts of
// the same answers still work.

// hostileURL is the fake server's address (the transport answers it).
const hostileURL = "http://hostile.invalid:1"

// goodShapes are the layers of the model "good": layer0 small, layer1 of
// 64 MiB (a valid size whose bytes a lying server need not send).
var goodShapes = [][]int64{{2, 3, 4}, {1024, 1024, 16}}

// modelInfo is a model of GET /v1/models with the given layer shapes.
func modelInfo(name string, shapes ...[]int64) ModelInfo {
	p := api.DefaultPreprocess()
	mi := ModelInfo{Name: name, Digest: "d-" + name, Preprocess: p, PreprocessKey: p.Key(), Table: "table of " + name}
	for i, s := range shapes {
		mi.Layers = append(mi.Layers, LayerInfo{Index: i, Name: fmt.Sprintf("layer%d", i), Tensor: fmt.Sprintf("t%d", i), Shape: s})
	}
	return mi
}

// hostileModels is a GET /v1/models answer: the model "good" and models
// whose numbers are past the caps (the issue's [2^20, 2^20, 2^10] first).
func hostileModels() ModelsResponse {
	rank := make([]int64, maxRank+1)
	for i := range rank {
		rank[i] = 1
	}
	many := make([][]int64, maxLayers+1)
	for i := range many {
		many[i] = []int64{1}
	}
	badLayer := modelInfo("badlayername", []int64{1})
	badLayer.Layers[0].Name = "a/b"
	flops := modelInfo("negflops", []int64{1})
	flops.Layers[0].CumGFLOPs = -1
	badDigest := modelInfo("baddigest", []int64{1})
	badDigest.Layers[0].Digest = "../../../../other-model" // would name another feature store directory
	return ModelsResponse{Protocol: ProtocolVersion, Source: "hostile", DType: api.Float32, Models: []ModelInfo{
		modelInfo("huge", []int64{1 << 20, 1 << 20, 1 << 10}),
		modelInfo("good", goodShapes...),
		modelInfo("zero", []int64{0, 5}),
		modelInfo("negative", []int64{-1, 4}),
		modelInfo("overflow", []int64{1 << 31, 1 << 31, 1 << 31, 1 << 31}),
		modelInfo("justover", []int64{MaxFeatureBytes / 4}), // the header tips it over
		modelInfo("scalar", []int64{}),
		modelInfo("rank", rank),
		modelInfo("manylayers", many...),
		modelInfo("a/b", []int64{1}),
		modelInfo("..", []int64{1}),
		modelInfo("layers", []int64{1}),
		modelInfo("good", []int64{8}), // listed twice
		badLayer,
		flops,
		badDigest,
	}}
}

// refusedModels is how many models of hostileModels are refused.
const refusedModels = 15

// fakeServer is an http.RoundTripper playing a feature server: models is
// the body of GET /v1/models, batch the body of POST /v1/batch given its
// request.
type fakeServer struct {
	models []byte
	batch  func(BatchRequest) []byte
}

func (f *fakeServer) RoundTrip(r *http.Request) (*http.Response, error) {
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Request: r, ProtoMajor: 1, ProtoMinor: 1}
	var body []byte
	switch r.URL.Path {
	case "/v1/models":
		resp.Header.Set("Content-Type", "application/json")
		body = f.models
	case "/v1/batch":
		var req BatchRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			return nil, err
		}
		resp.Header.Set("Content-Type", BatchContentType)
		body = f.batch(req)
	default:
		resp.StatusCode = http.StatusNotFound
		resp.Header.Set("Content-Type", "application/json")
		body = []byte(`{"error":"no endpoint","status":404}`)
	}
	if r.Body != nil {
		r.Body.Close()
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// dialFake dials a fakeServer, logging to log (nil: discarded).
func dialFake(f *fakeServer, log *slog.Logger) (*Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return Dial(ctx, clientLimits(ClientConfig{URLs: []string{hostileURL}, Transport: f, Timeout: 10 * time.Second, Logger: log}))
}

// goodNPY is the .npy file of model good's layer.
func goodNPY(layer int) []byte {
	return api.EncodeNPY(goodShapes[layer], nil, api.Float32)
}

// frameBytes is a frame with the lengths given, whatever the bytes that
// follow: what a lying server sends.
func frameBytes(index uint32, status, flags uint16, msgLen uint32, dataLen uint64, rest []byte) []byte {
	var h [frameHeaderLen]byte
	binary.LittleEndian.PutUint32(h[0:], index)
	binary.LittleEndian.PutUint16(h[4:], status)
	binary.LittleEndian.PutUint16(h[6:], flags)
	binary.LittleEndian.PutUint32(h[8:], msgLen)
	binary.LittleEndian.PutUint64(h[12:], dataLen)
	return append(h[:], rest...)
}

// frame is an honest frame's bytes.
func frame(f Frame) []byte {
	var b bytes.Buffer
	WriteFrame(&b, f)
	return b.Bytes()
}

// stream is a batch stream of n items made of frames.
func stream(n uint32, frames ...[]byte) []byte {
	b := append([]byte(batchMagic), binary.LittleEndian.AppendUint32(nil, n)...)
	for _, f := range frames {
		b = append(b, f...)
	}
	return b
}

// TestDialRefusesModelsPastCaps: of a /v1/models answer listing the issue's
// [2^20, 2^20, 2^10] layer and other numbers past the caps (zero, negative
// and overflowing dimensions, too many dimensions or layers, names that are
// no file name, a duplicate), only the good model is served, each refused
// one named in one log line; and the listing sizes follow the good shapes.
// An answer with no usable model, an unknown dtype or too many models
// fails Dial.
func TestDialRefusesModelsPastCaps(t *testing.T) {
	var log testenv.SyncBuffer
	models, _ := json.Marshal(hostileModels())
	c, err := dialFake(&fakeServer{models: models}, slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	ms := c.Extractor().Models()
	if len(ms) != 1 || ms[0].Name != "good" || len(ms[0].Layers) != len(goodShapes) {
		names := []string{}
		for _, m := range ms {
			names = append(names, m.Name)
		}
		t.Fatalf("models served: %q, want only good", names)
	}
	for i, l := range ms[0].Layers {
		if n := api.NPYSize(l.Shape, api.Float32); n != int64(len(goodNPY(i))) || c.npySize(BatchItem{Model: "good", Layer: i}) != n {
			t.Errorf("good layer %d: .npy size %d, client's %d, want %d", i, n, c.npySize(BatchItem{Model: "good", Layer: i}), len(goodNPY(i)))
		}
	}
	if tbl, ok := layersTable(c.Extractor(), "good"); !ok || tbl != "table of good" {
		t.Errorf("good's layers table: %q, %v", tbl, ok)
	}
	if got := strings.Count(log.String(), "model refused"); got != refusedModels {
		t.Errorf("%d refusals logged, want %d:\n%s", got, refusedModels, log.String())
	}

	for name, resp := range map[string]ModelsResponse{
		"only bad models": {Protocol: ProtocolVersion, DType: api.Float32, Models: hostileModels().Models[:1]},
		"unknown dtype":   {Protocol: ProtocolVersion, DType: "int8", Models: []ModelInfo{modelInfo("good", goodShapes...)}},
		"too many models": {Protocol: ProtocolVersion, DType: api.Float32, Models: make([]ModelInfo, maxModels+1)},
	} {
		b, _ := json.Marshal(resp)
		if c, err := dialFake(&fakeServer{models: b}, nil); err == nil {
			c.Close()
			t.Errorf("%s: Dial succeeded", name)
		}
	}
}

// TestBatchFramesPastCaps: the frame of data_len 2^40 (the server
// also declaring the [2^20, 2^20, 2^10] layer, which made the old client's
// bound 4 PB) fails the batch with ErrBadAnswer at once and allocates
// nothing for it; so do the other lying lengths. Data of the wrong length
// or header within the bounds fails its item only; the honest frames of
// the same stream are read. A frame declaring a valid 64 MiB and sending
// ten bytes costs no more than a chunk.
func TestBatchFramesPastCaps(t *testing.T) {
	l0, l1 := goodNPY(0), goodNPY(1)
	short := l0[:len(l0)-4]
	badHeader := bytes.Clone(l0)
	badHeader[20] ^= 0xff
	blob := func(raw []byte) []byte {
		b, err := codec.Encode(nil, raw, 4, codec.S2)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	other := api.EncodeNPY([]int64{4, 3, 2, 1}, nil, api.Float32)
	ok := func(i uint32, d []byte) []byte { return frame(Frame{Index: i, Status: StatusOK, Data: d}) }
	items := []BatchItem{{Model: "good", Layer: 0, Key: "a.jpg"}, {Model: "good", Layer: 0, Key: "b.jpg"}, {Model: "good", Layer: 1, Key: "c.jpg"}}
	type want struct {
		batch   error   // the error of the batch (for the items not answered)
		items   []error // per item answered: nil (its data is the feature) or the error
		maxHeap uint64  // bytes the batch may allocate
	}
	const small = 4 << 20
	for _, c := range []struct {
		name   string
		stream []byte
		want   want
	}{
		{"data_len 2^40", stream(3, frameBytes(0, StatusOK, 0, 0, 1<<40, l0)), want{batch: ErrBadAnswer, maxHeap: small}},
		{"data_len 2^64-1", stream(3, frameBytes(2, StatusOK, FrameCompressed, 0, ^uint64(0), nil)), want{batch: ErrBadAnswer, maxHeap: small}},
		{"one byte over", stream(3, ok(1, l0), frameBytes(0, StatusOK, 0, 0, uint64(len(l0))+1, l0)), want{batch: ErrBadAnswer, items: []error{nil}, maxHeap: small}},
		{"valid 64 MiB declared, 10 bytes sent", stream(3, ok(0, l0), frameBytes(2, StatusOK, 0, 0, uint64(len(l1)), l1[:10])), want{batch: ErrUnavailable, items: []error{nil}, maxHeap: small}},
		{"message of 4 GiB", stream(3, frameBytes(0, StatusBadImage, 0, ^uint32(0), 0, nil)), want{batch: ErrBadAnswer, maxHeap: small}},
		{"error frame with data", stream(3, frameBytes(0, StatusNotFound, 0, 0, 100, make([]byte, 100))), want{batch: ErrBadAnswer, maxHeap: small}},
		{"heartbeat with data", stream(3, frameBytes(HeartbeatIndex, 0, 0, 0, 1<<30, nil)), want{batch: ErrBadAnswer, maxHeap: small}},
		{"frame for no item", stream(3, ok(7, l0)), want{batch: ErrBadAnswer, maxHeap: small}},
		{"frame twice", stream(3, ok(0, l0), ok(0, l0)), want{batch: ErrBadAnswer, items: []error{nil}, maxHeap: small}},
		{"2^32-1 items announced", stream(^uint32(0)), want{batch: ErrBadAnswer, maxHeap: small}},
		{"short, bad header, honest", stream(3, ok(0, short), ok(1, badHeader), ok(2, l1)),
			want{items: []error{ErrBadAnswer, ErrBadAnswer, nil}, maxHeap: 3 * uint64(len(l1))}},
		{"blob of another size, honest blob", stream(3, frame(Frame{Index: 0, Status: StatusOK, Flags: FrameCompressed, Data: blob(other)}),
			frame(Frame{Index: 1, Status: StatusOK, Flags: FrameCompressed, Data: blob(l0)}), frame(Frame{Index: 2, Status: StatusOK, Flags: FrameCompressed, Data: []byte("FFZ1 not a blob")})),
			want{items: []error{ErrBadAnswer, nil, ErrBadAnswer}, maxHeap: small}},
	} {
		t.Run(c.name, func(t *testing.T) {
			models, _ := json.Marshal(hostileModels())
			body := c.stream
			cl, err := dialFake(&fakeServer{models: models, batch: func(BatchRequest) []byte { return body }}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			var got []error
			var data [][]byte
			var order []int
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			err = cl.postBatch(hostileURL, items, func(i int, d []byte, _ int, err error) {
				order = append(order, i)
				got = append(got, err)
				data = append(data, d)
			})
			runtime.ReadMemStats(&after)
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("the batch took %v", took)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > c.want.maxHeap {
				t.Errorf("the batch allocated %d bytes, want at most %d", alloc, c.want.maxHeap)
			}
			if (c.want.batch == nil) != (err == nil) || (c.want.batch != nil && !errors.Is(err, c.want.batch)) {
				t.Errorf("batch error %v, want %v", err, c.want.batch)
			}
			if len(got) != len(c.want.items) {
				t.Fatalf("%d items answered (%v), want %d", len(got), got, len(c.want.items))
			}
			for k, w := range c.want.items {
				i := order[k]
				switch {
				case w == nil && got[k] != nil:
					t.Errorf("item %d: %v, want its feature", i, got[k])
				case w == nil && !bytes.Equal(data[k], goodNPY(items[i].Layer)):
					t.Errorf("item %d: %d bytes, not its feature", i, len(data[k]))
				case w != nil && !errors.Is(got[k], w):
					t.Errorf("item %d: %v, want %v", i, got[k], w)
				}
			}
		})
	}
}

// TestReadBoundedStopsAtItsLength: readBounded reads exactly n bytes of a
// longer stream (the next frame is left to read) in growing chunks.
func TestReadBoundedStopsAtItsLength(t *testing.T) {
	for _, n := range []int{1, frameChunk - 1, frameChunk, frameChunk + 1, 3*frameChunk + 17} {
		src := make([]byte, n+100)
		for i := range src {
			src[i] = byte(i * 7)
		}
		r := bytes.NewReader(src)
		got, err := readBounded(r, uint64(n))
		if err != nil || !bytes.Equal(got, src[:n]) || r.Len() != 100 {
			t.Errorf("n=%d: %d bytes, %v, %d left unread (want 100)", n, len(got), err, r.Len())
		}
		if _, err := readBounded(bytes.NewReader(src[:n/2]), uint64(n)); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("n=%d, half sent: %v, want ErrUnexpectedEOF", n, err)
		}
	}
}

// TestDialRefusesModelsWithAliasesPastCaps: a model listing 100,000
// aliases (each would be a directory of the mount, and the layers table
// pairs each with each layer) or an alias name no file system takes is
// refused; a model with a few aliases is served with them.
func TestDialRefusesModelsWithAliasesPastCaps(t *testing.T) {
	good := modelInfo("good", goodShapes...)
	good.Aliases = map[string]string{"pool": "layer1"}
	many := modelInfo("manyaliases", []int64{1})
	many.Aliases = map[string]string{}
	for i := range 100000 {
		many.Aliases[fmt.Sprintf("a%d", i)] = "layer0"
	}
	long := modelInfo("longalias", []int64{1})
	long.Aliases = map[string]string{strings.Repeat("a", 300): "layer0"}
	models, _ := json.Marshal(ModelsResponse{Protocol: ProtocolVersion, Source: "hostile", DType: api.Float32, Models: []ModelInfo{good, many, long}})
	c, err := dialFake(&fakeServer{models: models}, nil)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	var names []string
	for _, m := range c.Extractor().Models() {
		names = append(names, m.Name)
	}
	if len(names) != 1 || names[0] != "good" {
		t.Fatalf("models served: %q, want only good", names)
	}
	if l, ok := c.Extractor().Models()[0].Lookup("pool"); !ok || l.Name != "layer1" {
		t.Errorf("good's alias pool: %+v, %v; want layer1", l, ok)
	}
}
