package test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// slowClientRSSBound is what two clients that never read may add to the
// server's RSS (docs/RELIABILITY.md): 64 MiB of answers each
// (--max-buffered-bytes-per-request), the extraction of the features
// that fill them, and the cache's writes.
const slowClientRSSBound = 512 << 20

// TestSlowClientsHoldBoundedMemory: two clients with the token POST 300
// large features each (ResNet-50 layer0 and layer1 of 150 images, 600 MB
// of answers each) and never read: the server's RSS rises by less than
// slowClientRSSBound, they are disconnected after --write-timeout, no bytes
// stay buffered, and another client's requests are answered meanwhile.
// Before, every answer was buffered: RSS rose by gigabytes and stayed.
func TestSlowClientsHoldBoundedMemory(t *testing.T) {
	d := genDataset(t, "--classes", "2", "--train", "75", "--val", "0", "--formats", "jpg")
	s := startServe(t, d.Dir, nil, "--write-timeout", "3s", "--heartbeat", "500ms")
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	imgs := d.images("train/")
	items := func(layers []int, imgs []manifestObject) []byte {
		var it []map[string]any
		for _, l := range layers {
			for _, o := range imgs {
				it = append(it, map[string]any{"model": modelName, "layer": l, "key": o.Key})
			}
		}
		b, _ := json.Marshal(map[string]any{"items": it})
		return b
	}
	client := &http.Client{Timeout: 60 * time.Second}
	defer client.CloseIdleConnections()
	// Warm up: the layers' sessions are made.
	if _, _, err := timedDo(client, "POST", s.URL+"/v1/batch", s.Token, items([]int{0, 1, 12}, imgs[:2])); err != nil {
		t.Fatal(err)
	}
	base := rssBytes(t, s.PID(), "VmRSS")

	body := items([]int{0, 1}, imgs)
	var slow []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.(*net.TCPConn).SetReadBuffer(64 << 10)
		fmt.Fprintf(c, "POST /v1/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			s.Token, len(body), body)
		slow = append(slow, c)
	}
	start := time.Now()
	peak := base
	sample := func() { peak = max(peak, rssBytes(t, s.PID(), "VmRSS")) }
	// Another client meanwhile.
	took, _, err := timedDo(client, "POST", s.URL+"/v1/batch", s.Token, items([]int{12}, imgs[2:4]))
	if err != nil {
		t.Errorf("another client's batch while two do not read: %v after %v", err, took)
	}
	// Until the slow clients are disconnected (or 45s).
	for time.Since(start) < 45*time.Second {
		sample()
		if peak-base > 2*slowClientRSSBound {
			break
		}
		if time.Since(start) > 8*time.Second && serverStat(t, s, "buffered_bytes") == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	sample()
	for i, c := range slow {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := io.Copy(io.Discard, c)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("slow client %d: still connected %v after it stopped reading (%d bytes read)", i, time.Since(start), n)
		}
	}
	if b := serverStat(t, s, "buffered_bytes"); b != 0 {
		t.Errorf("%v bytes still buffered after the slow clients left", b)
	}
	time.Sleep(5 * time.Second)
	after := rssBytes(t, s.PID(), "VmRSS")
	t.Logf("server RSS: %s before, peak %s (+%s), %s 5s after the slow clients left; other client's batch %v",
		mib(base), mib(peak), mib(peak-base), mib(after), took)
	if peak-base >= slowClientRSSBound {
		t.Errorf("two clients that do not read raised the server's RSS by %s, bound %s", mib(peak-base), mib(slowClientRSSBound))
	}
}

// serverStat returns one figure of GET /v1/stats's "server" section.
func serverStat(t *testing.T, s *served, name string) float64 {
	t.Helper()
	_, b, err := timedDo(&http.Client{Timeout: 30 * time.Second}, "GET", s.URL+"/v1/stats", s.Token, nil)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Server map[string]any `json:"server"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	v, ok := st.Server[name].(float64)
	if !ok {
		t.Errorf("GET /v1/stats: no server.%s", name)
		return -1
	}
	return v
}
