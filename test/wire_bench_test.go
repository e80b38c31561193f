package test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWireCompressionBench measures layer12 features read through a remote
// mount (--remote) over the netns test bed, from a server with
// --wire-compression s2 and one with it off, side by side: two links
// shaped alike, each server's cache warmed first (at full speed, through a
// mount of its own), then every round reads a prefix of images not read
// before through each config's measured mount, with 8 readers. It checks
// that both configs serve the same bytes and that the compressed one sends
// fewer. With FEATUREFS_WIRE_BENCH=full it runs 50 and 200 Mbit/s, 24
// images and 3 rounds and writes a markdown section to
// FEATUREFS_WIRE_BENCH_OUT (scripts/bench-wire.sh); otherwise one quick
// round at 200 Mbit/s.
func TestWireCompressionBench(t *testing.T) {
	full := os.Getenv("FEATUREFS_WIRE_BENCH") == "full"
	mbits, images, rounds := []int{200}, 6, 1
	if full {
		mbits, images, rounds = []int{50, 200}, 24, 3
	}
	data := t.TempDir()
	var imgBytes int64
	for j := range images {
		b := benchJPEG(480+j%5*10, 360+j%3*10, j)
		imgBytes += int64(len(b))
		if err := os.WriteFile(filepath.Join(data, fmt.Sprintf("base%03d.jpg", j)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	prefix := func(mbit, round int) string { return fmt.Sprintf("m%d-r%d", mbit, round) }
	for _, mbit := range mbits {
		for r := range rounds {
			dir := filepath.Join(data, prefix(mbit, r))
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for j := range images {
				if err := os.Link(filepath.Join(data, fmt.Sprintf("base%03d.jpg", j)), filepath.Join(dir, fmt.Sprintf("%03d.jpg", j))); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	type config struct {
		name string
		link *netLink
		url  string
		m    *mounted
	}
	configs := []*config{{name: "off"}, {name: "s2"}}
	readAll := func(m *mounted, dir string) (map[string][]byte, time.Duration) {
		var mu sync.Mutex
		out := map[string][]byte{}
		names := make(chan string)
		var wg sync.WaitGroup
		t0 := time.Now()
		for range 8 {
			wg.Go(func() {
				for n := range names {
					b, err := os.ReadFile(filepath.Join(m.Layer(testLayer), dir, n))
					if err != nil {
						t.Errorf("read %s/%s: %v", dir, n, err)
						continue
					}
					mu.Lock()
					out[n] = b
					mu.Unlock()
				}
			})
		}
		for j := range images {
			names <- fmt.Sprintf("%03d.npy", j)
		}
		close(names)
		wg.Wait()
		return out, time.Since(t0)
	}
	for _, c := range configs {
		c.link = newNetLink(t, 10000)
		c.url = startServeIn(t, c.link, data, "--wire-compression", c.name, "--log-level", "info")
		warm := mountIn(t, c.link, c.url, "--prefetch", "off")
		for _, mbit := range mbits {
			for r := range rounds {
				readAll(warm, prefix(mbit, r))
			}
		}
		warm.Unmount(t)
		c.m = mountIn(t, c.link, c.url, "--prefetch", "off")
	}
	type run struct{ perSec []float64 }
	results := map[string]map[int]*run{}
	var firstRead map[string][]byte
	for _, mbit := range mbits {
		for _, c := range configs {
			c.link.SetRate(t, mbit)
			if results[c.name] == nil {
				results[c.name] = map[int]*run{}
			}
			results[c.name][mbit] = &run{}
		}
		for r := range rounds {
			for i := range configs {
				c := configs[(i+r)%len(configs)]
				got, took := readAll(c.m, prefix(mbit, r))
				results[c.name][mbit].perSec = append(results[c.name][mbit].perSec, float64(images)/took.Seconds())
				if firstRead == nil {
					firstRead = got
				}
				for n, b := range got {
					if !bytes.Equal(b, firstRead[n]) {
						t.Errorf("%s, %d Mbit/s, round %d: %s differs from the other config's", c.name, mbit, r, n)
					}
				}
			}
		}
	}
	wire := map[string][2]int64{}
	for _, c := range configs {
		st := mountStats(t, c.m)
		w := [2]int64{statsField(t, st, "extractor.wire.bytes"), statsField(t, st, "extractor.wire.raw_bytes")}
		wire[c.name] = w
		if w[1] == 0 {
			t.Errorf("%s: no feature bytes counted", c.name)
		}
	}
	if off, s2 := wire["off"], wire["s2"]; off[0] != off[1] || float64(s2[1])/float64(s2[0]) < 1.3 {
		t.Errorf("wire bytes (on the wire, raw): off %v, s2 %v; want off plain and s2 at least 1.3x smaller", off, s2)
	}
	med := func(v []float64) float64 {
		s := append([]float64(nil), v...)
		sort.Float64s(s)
		return s[len(s)/2]
	}
	mm := func(v []float64) (float64, float64) {
		s := append([]float64(nil), v...)
		sort.Float64s(s)
		return s[0], s[len(s)-1]
	}
	var md strings.Builder
	fmt.Fprintf(&md, "## Wire: layer12 features from a remote server, compressed vs plain\n\n")
	fmt.Fprintf(&md, "Command: `make bench` (scripts/bench-wire.sh: `go test -run '^TestWireCompressionBench$' ./test` with FEATUREFS_WIRE_BENCH=full). "+
		"Two `featurefs serve` instances over the same %d generated JPEGs (mean %.0f KB), each behind its own veth pair shaped with tc tbf "+
		"(the netns test bed), one with `--wire-compression off` and one with `s2` (the default); each server's cache warmed first at full link "+
		"speed, so the rounds measure the link; each round reads %d images not read before through a `featurefs mount --remote` per server "+
		"(fresh cache), 8 readers, ResNet-50 `layer12` (802,944-byte .npy files); %d rounds per bandwidth, the order rotating: medians (min-max). "+
		"Bytes per feature on the wire from the mounts' stats (`extractor.wire`). %d CPUs, load average %s after.\n\n",
		images, float64(imgBytes)/float64(images)/1000, images, rounds, nproc(), loadAvg())
	fmt.Fprintf(&md, "| link | plain: samples/s | s2: samples/s | s2 ÷ plain |\n|---|---:|---:|---|\n")
	for _, mbit := range mbits {
		off, s2 := results["off"][mbit].perSec, results["s2"][mbit].perSec
		lo, hi := mm(off)
		lo2, hi2 := mm(s2)
		ratios := make([]float64, len(off))
		for i := range off {
			ratios[i] = s2[i] / off[i]
		}
		verdict := ""
		if mbit == 50 {
			v := "MISSED"
			if med(ratios) >= 1.6 {
				v = "met"
			}
			verdict = fmt.Sprintf(" (target >= 1.6x: %s)", v)
		}
		fmt.Fprintf(&md, "| %d Mbit/s | %.2f (%.2f-%.2f) | %.2f (%.2f-%.2f) | **%.2fx**%s |\n", mbit, med(off), lo, hi, med(s2), lo2, hi2, med(ratios), verdict)
	}
	fmt.Fprintf(&md, "\nBytes per feature on the wire: plain %.0f, s2 %.0f (%.2fx fewer).\n",
		float64(wire["off"][0])/float64(wire["off"][1])*802944, float64(wire["s2"][0])/float64(wire["s2"][1])*802944,
		float64(wire["s2"][1])/float64(wire["s2"][0]))
	t.Logf("\n%s", md.String())
	if p := os.Getenv("FEATUREFS_WIRE_BENCH_OUT"); p != "" {
		if err := os.WriteFile(p, []byte(md.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func nproc() int {
	n := 0
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		n = strings.Count(string(b), "\nprocessor")
		if strings.HasPrefix(string(b), "processor") {
			n++
		}
	}
	return n
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
