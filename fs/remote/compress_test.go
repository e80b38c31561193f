package remote

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/cache/codec"
	"github.com/featurefs/featurefs/extractor/api"
)

// bigShape is a layer whose fake features (the object's size, the layer
// index, then zeros) compress well: 256 KiB.
var bigShape = []int64{64, 1024}

func bigFeature(content []byte, layer int) []byte {
	data := make([]float32, 64*1024)
	data[0], data[1] = float32(len(content)), float32(layer)
	return api.EncodeNPY(bigShape, data, api.Float32)
}

// TestWireCompressionNegotiated: a client that accepts EncodingFFZ1 gets
// compressed frames from a server with WireCompression, and the features
// it returns are the plain .npy bytes; a client that does not ask (an
// older one, or a request without "encodings") gets plain frames; a
// server without WireCompression (as one that predates it) answers plain
// frames that the client reads as before.
func TestWireCompressionNegotiated(t *testing.T) {
	objects := map[string]string{"a/x.jpg": "x-bytes", "a/y.jpg": "yy-bytes"}
	dir := writeObjects(t, objects)
	on := startServerEx(t, dir, newFakeExtractorShape(bigShape), func(c *testConfig) { c.WireCompression = codec.S2 })
	off := startServerEx(t, dir, newFakeExtractorShape(bigShape), nil)
	for _, tc := range []struct {
		name       string
		ts         *testServer
		compressed bool
	}{{"compressing server", on, true}, {"plain server", off, false}} {
		c := dial(t, ClientConfig{URLs: []string{tc.ts.URL}})
		for key, content := range objects {
			got, err := c.Extractor().Extract(context.Background(), featureReq(key, 1, ""))
			if err != nil || !bytes.Equal(got, bigFeature([]byte(content), 1)) {
				t.Fatalf("%s: %s: %v, right bytes %v", tc.name, key, err, bytes.Equal(got, bigFeature([]byte(content), 1)))
			}
		}
		cs, ss := c.Stats(), tc.ts.Stats()
		raw := int64(2 * len(bigFeature(nil, 1)))
		if cs.RawBytes != raw || ss.RawBytesOut != raw {
			t.Errorf("%s: client raw bytes %d, server raw bytes out %d; want %d", tc.name, cs.RawBytes, ss.RawBytesOut, raw)
		}
		if tc.compressed && (cs.WireBytes*20 > raw || ss.BytesOut != cs.WireBytes) {
			t.Errorf("%s: %d bytes on the wire (server says %d) for %d raw; want them compressed", tc.name, cs.WireBytes, ss.BytesOut, raw)
		}
		if !tc.compressed && cs.WireBytes != raw {
			t.Errorf("%s: %d bytes on the wire for %d raw; want plain", tc.name, cs.WireBytes, raw)
		}
	}
	// A request that names no encoding (an older client): plain frames.
	body := `{"items":[{"model":"tiny","layer":1,"key":"a/x.jpg"}]}`
	_, frames := postBatch(t, on.URL, body)
	if f := frames[0]; f.Status != 200 || f.Flags != 0 || !bytes.Equal(f.Data, bigFeature([]byte("x-bytes"), 1)) {
		t.Errorf("a request without encodings: status %d flags %d, %d bytes; want the plain feature", f.Status, f.Flags, len(f.Data))
	}
	// Asking for it by name: a compressed frame, whose blob decodes to it.
	_, frames = postBatch(t, on.URL, `{"items":[{"model":"tiny","layer":1,"key":"a/x.jpg"}],"encodings":["zz","ffz1"]}`)
	f := frames[0]
	got, err := codec.Decode(nil, f.Data)
	if f.Status != 200 || f.Flags != FrameCompressed || err != nil || !bytes.Equal(got, bigFeature([]byte("x-bytes"), 1)) {
		t.Errorf("a request with encodings ffz1: status %d flags %d, decoded: %v", f.Status, f.Flags, err)
	}
}

// TestDamagedCompressedFrameFailsItsItem: a server whose compressed frame
// does not decode fails that item with an error, and the client goes on.
func TestDamagedCompressedFrameFailsItsItem(t *testing.T) {
	good := bigFeature([]byte("x"), 1)
	blob, err := codec.Encode(nil, good, 4, codec.S2)
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(blob)
	bad[len(bad)-1] ^= 0xff
	models := startServerEx(t, writeObjects(t, map[string]string{"a/x.jpg": "x"}), newFakeExtractorShape(bigShape), nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/v1/batch") {
			models.ServeHTTP(w, r) // models, list, stat: a real server's
			return
		}
		w.Header().Set("Content-Type", BatchContentType)
		writeStreamHeader(w, 2)
		WriteFrame(w, Frame{Index: 0, Status: 200, Flags: FrameCompressed, Data: bad})
		WriteFrame(w, Frame{Index: 1, Status: 200, Flags: FrameCompressed, Data: blob})
	}))
	defer srv.Close()
	c := dial(t, ClientConfig{URLs: []string{srv.URL}})
	var errs []error
	var datas [][]byte
	if err := c.postBatch(srv.URL, []BatchItem{{Model: "tiny", Layer: 1, Key: "a/x.jpg"}, {Model: "tiny", Layer: 1, Key: "a/y.jpg"}},
		func(i int, data []byte, wire int, err error) {
			errs = append(errs, err)
			datas = append(datas, data)
		}); err != nil {
		t.Fatal(err)
	}
	if len(errs) != 2 || errs[0] == nil || !strings.Contains(fmt.Sprint(errs[0]), "compressed feature") || errs[1] != nil || !bytes.Equal(datas[1], good) {
		t.Fatalf("answers: %v; want the damaged item failed, the other decoded", errs)
	}
}

// TestTransientAndPlainItems: a transient item (a split client's tensor)
// is computed and not stored, so asking again computes it again, while
// a stored feature still answers it; a plain item comes uncompressed
// from a compressing server, and the client reads both kinds.
func TestTransientAndPlainItems(t *testing.T) {
	objects := map[string]string{"a/x.jpg": "x-bytes", "a/y.jpg": "yy-bytes"}
	ts := startServerEx(t, writeObjects(t, objects), newFakeExtractorShape(bigShape), func(c *testConfig) { c.WireCompression = codec.S2 })
	want := bigFeature([]byte("x-bytes"), 1)
	item := `{"model":"tiny","layer":1,"key":"a/x.jpg","transient":true,"plain":true}`
	for i := range 2 {
		_, frames := postBatch(t, ts.URL, `{"items":[`+item+`],"encodings":["ffz1"]}`)
		if f := frames[0]; f.Status != 200 || f.Flags != 0 || !bytes.Equal(f.Data, want) {
			t.Fatalf("transient plain item, ask %d: status %d flags %d, right bytes %v; want the plain feature", i+1, f.Status, f.Flags, bytes.Equal(f.Data, want))
		}
		if got := ts.Ex.Calls.Load(); got != int64(i+1) {
			t.Fatalf("after %d asks for a transient item: %d extractions; want %d (not stored)", i+1, got, i+1)
		}
	}
	// A transient item that is not plain is compressed.
	_, frames := postBatch(t, ts.URL, `{"items":[{"model":"tiny","layer":1,"key":"a/x.jpg","transient":true}],"encodings":["ffz1"]}`)
	if f := frames[0]; f.Status != 200 || f.Flags != FrameCompressed {
		t.Fatalf("transient item: status %d flags %d; want a compressed frame", f.Status, f.Flags)
	}
	// A stored feature answers a transient item.
	ts.Ex.Calls.Store(0)
	_, frames = postBatch(t, ts.URL, `{"items":[{"model":"tiny","layer":1,"key":"a/y.jpg"}],"encodings":["ffz1"]}`)
	if frames[0].Status != 200 || ts.Ex.Calls.Load() != 1 {
		t.Fatalf("plain item: status %d, %d extractions", frames[0].Status, ts.Ex.Calls.Load())
	}
	_, frames = postBatch(t, ts.URL, `{"items":[{"model":"tiny","layer":1,"key":"a/y.jpg","transient":true}]}`)
	if f := frames[0]; f.Status != 200 || !bytes.Equal(f.Data, bigFeature([]byte("yy-bytes"), 1)) || ts.Ex.Calls.Load() != 1 {
		t.Fatalf("transient item of a stored feature: status %d, right bytes %v, %d extractions; want it from the cache (1)", f.Status, bytes.Equal(f.Data, bigFeature([]byte("yy-bytes"), 1)), ts.Ex.Calls.Load())
	}
	// Through the client: the flags reach the server, the bytes come back.
	c := dial(t, ClientConfig{URLs: []string{ts.URL}})
	for _, opts := range []itemOpts{{transient: true, plain: true}, {transient: true}} {
		got, wire, err := c.Extractor().extractWire(context.Background(), featureReq("a/x.jpg", 1, ""), opts)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%+v: %v, right bytes %v", opts, err, bytes.Equal(got, want))
		}
		if opts.plain != (wire == len(want)) {
			t.Errorf("%+v: %d bytes on the wire for %d", opts, wire, len(want))
		}
	}
}
