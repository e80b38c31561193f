package remote

import (
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"testing"
)

// TestErrorsCutLongInput: an error the server sends back shows a client's
// input (a key, a model name, a query parameter) quoted and, past
// MaxEchoBytes, cut with "..." and its length: a 5,000-byte key given to
// GET /v1/feature is a 400 of a few hundred bytes, not one that echoes the
// key whole; so are a long model name, layer, list prefix and viewparams
// parameter, and a long key's frame in a batch.
func TestErrorsCutLongInput(t *testing.T) {
	ts := startServer(t, map[string]string{"a/x.jpg": "hello"}, nil)
	long := strings.Repeat("k", 5000)
	head := strconv.Quote(long[:MaxEchoBytes]) + "... (5000 bytes)"
	for _, p := range []string{
		"/v1/feature?model=tiny&layer=0&key=" + long,
		"/v1/feature?model=" + long + "&layer=0&key=a/x.jpg",
		"/v1/feature?model=tiny&layer=" + long + "&key=a/x.jpg",
		"/v1/list?prefix=" + long,
		"/v1/viewparams?model=tiny&layer=0&key=a/x.jpg&view=" + long,
	} {
		resp := authorizedDo(t, "GET", ts.URL+p, nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e ErrorResponse
		if err := json.Unmarshal(b, &e); err != nil || resp.StatusCode < 400 || resp.StatusCode >= 500 {
			t.Errorf("GET %.60s...: %d %.300s; want a 4xx error answer", p, resp.StatusCode, b)
			continue
		}
		if len(b) > 2*MaxEchoBytes+200 || !strings.Contains(e.Error, head) {
			t.Errorf("GET %.60s...: %d bytes of answer %.400q; want the input shown as %.40s...", p, len(b), e.Error, head)
		}
	}
	st, msgs := batchStatuses(t, ts, []BatchItem{{Model: "tiny", Layer: 0, Key: long}})
	if st[0] != StatusBadRequest || len(msgs[0]) > 2*MaxEchoBytes || !strings.Contains(msgs[0], head) {
		t.Errorf("batch item of a 5000-byte key: status %d, message of %d bytes %.300q; want 400 showing the key cut", st[0], len(msgs[0]), msgs[0])
	}
	if short := echo("a/x.jpg"); short != `"a/x.jpg"` {
		t.Errorf("echo of a short key: %s, want it quoted whole", short)
	}
	if cut := echo(strings.Repeat("é", 150)); !strings.HasPrefix(cut, strconv.Quote(strings.Repeat("é", 100))+"...") {
		t.Errorf("echo cut inside a rune: %s", cut)
	}
}
