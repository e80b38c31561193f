package remote

import (
	"encoding/json"
	"testing"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/naming"
)

// FuzzModelsAnswer: whatever GET /v1/models answers, Dial does not panic,
// and every model it serves is within the caps: a usable name, 1 to
// maxLayers layers, each a usable name and a shape whose .npy file is at
// most MaxFeatureBytes, the client's sizes equal to the shapes'.
func FuzzModelsAnswer(f *testing.F) {
	good, _ := json.Marshal(ModelsResponse{Protocol: ProtocolVersion, DType: api.Float32, Models: []ModelInfo{modelInfo("good", goodShapes...)}})
	f.Add(good)
	hostile, _ := json.Marshal(hostileModels())
	f.Add(hostile)
	f.Add([]byte(`{"protocol":1,"dtype":"float32","models":[{"name":"m","layers":[{"index":0,"name":"l","shape":[1048576,1048576,1024]}]}]}`))
	f.Add([]byte(`{"protocol":1,"dtype":"float16","models":[{"name":"m","layers":[{"index":0,"name":"l","shape":[9223372036854775807,2]}]}]}`))
	f.Add([]byte(`{"protocol":1,"dtype":"float32","models":[{"name":"m","layers":[{"index":0,"name":"l","shape":[-3,-5]}]}]}`))
	f.Add([]byte(`{"protocol":1,"models":[]}`))
	f.Add([]byte(`{"protocol":1,"dtype":"float32","models":[{"name":"m","layers":[{"index":0,"name":"l","shape":[1]}]}]`)) // truncated
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := dialFake(&fakeServer{models: body}, nil)
		if err != nil {
			return
		}
		defer c.Close()
		ms := c.Extractor().Models()
		if len(ms) == 0 || len(ms) > maxModels {
			t.Fatalf("%d models served", len(ms))
		}
		for _, m := range ms {
			if !naming.ValidName(m.Name) || len(m.Name) > maxNameLen || len(m.Layers) == 0 || len(m.Layers) > maxLayers {
				t.Fatalf("model %q with %d layers served", m.Name, len(m.Layers))
			}
			for i, l := range m.Layers {
				n := api.NPYSize(l.Shape, c.info.DType)
				if !naming.ValidName(l.Name) || len(l.Shape) == 0 || len(l.Shape) > maxRank || n <= 0 || n > MaxFeatureBytes || c.npySize(BatchItem{Model: m.Name, Layer: i}) != n {
					t.Fatalf("model %q layer %d %q of shape %v (%d bytes, the client's %d) served", m.Name, i, l.Name, l.Shape, n, c.npySize(BatchItem{Model: m.Name, Layer: i}))
				}
				for _, d := range l.Shape {
					if d <= 0 {
						t.Fatalf("model %q layer %d of shape %v served", m.Name, i, l.Shape)
					}
				}
			}
		}
	})
}

// FuzzBatchAnswer: whatever POST /v1/batch answers (the seeds: honest
// streams and the lying lengths of TestBatchFramesPastCaps), the client
// does not panic, answers each item at most once, and every feature it
// accepts is exactly its item's .npy file; the models declare a valid 64
// MiB layer, which lying lengths must not turn into 64 MiB allocations
// (readBounded), so the target stays fast.
func FuzzBatchAnswer(f *testing.F) {
	l0, l1 := goodNPY(0), goodNPY(1)
	ok := func(i uint32, d []byte) []byte { return frame(Frame{Index: i, Status: StatusOK, Data: d}) }
	f.Add(stream(3, ok(0, l0), frame(Frame{Index: HeartbeatIndex}), ok(1, l0), frame(Frame{Index: 2, Status: StatusNotFound, Message: "gone"})))
	f.Add(stream(3, frameBytes(0, StatusOK, 0, 0, 1<<40, l0)))
	f.Add(stream(3, frameBytes(2, StatusOK, 0, 0, uint64(len(l1)), l1[:100])))
	f.Add(stream(3, frameBytes(2, StatusOK, FrameCompressed, 0, ^uint64(0), nil)))
	f.Add(stream(3, frameBytes(1, StatusBadImage, 0, ^uint32(0), 0, nil)))
	f.Add(stream(3, frameBytes(HeartbeatIndex, 0, 0, 0, 1<<30, nil)))
	f.Add(stream(^uint32(0)))
	f.Add(stream(3, ok(0, l0[:len(l0)-1])))
	models, _ := json.Marshal(ModelsResponse{Protocol: ProtocolVersion, DType: api.Float32, Models: []ModelInfo{modelInfo("good", goodShapes...)}})
	items := []BatchItem{{Model: "good", Layer: 0, Key: "a.jpg"}, {Model: "good", Layer: 0, Key: "b.jpg"}, {Model: "good", Layer: 1, Key: "c.jpg"}}
	// One client for the worker's calls (they run one at a time): the
	// fake server answers each with that call's body.
	var body []byte
	c, err := dialFake(&fakeServer{models: models, batch: func(BatchRequest) []byte { return body }}, nil)
	if err != nil {
		f.Fatal(err)
	}
	defer c.Close()
	f.Fuzz(func(t *testing.T, b []byte) {
		body = b
		seen := make([]bool, len(items))
		c.postBatch(hostileURL, items, func(i int, data []byte, _ int, err error) {
			if i < 0 || i >= len(items) || seen[i] {
				t.Fatalf("item %d answered twice or out of range", i)
			}
			seen[i] = true
			if err == nil && int64(len(data)) != c.npySize(items[i]) {
				t.Fatalf("item %d: %d bytes accepted, its .npy has %d", i, len(data), c.npySize(items[i]))
			}
		})
	})
}
