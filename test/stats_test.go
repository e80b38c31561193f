package test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/common/expfmt"

	"github.com/featurefs/featurefs/fs/figures"
	"github.com/featurefs/featurefs/test/testenv"
)

// freePort returns a 127.0.0.1 address nobody listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestStatsCommandAndMetrics reads a few features and a bad object through a
// real mount with --metrics-addr, then checks that `featurefs stats`, its
// --json, the stats file and the Prometheus endpoint agree with each other
// and with what was read.
func TestStatsCommandAndMetrics(t *testing.T) {
	ds := genDataset(t, "--classes", "2", "--train", "2", "--val", "0", "--bad", "--min-side", "64", "--max-side", "200")
	addr := freePort(t)
	// Prefetch off: the figures below count exactly what is read.
	m := testMount(t, mountConfig{Source: ds.Dir, Args: []string{"--metrics-addr", addr, "--prefetch", "off"}})
	names := featureNames(ds.keys(t))

	var fetched, served int64
	read := 0
	for _, o := range ds.images("train/") {
		if strings.Contains(o.Key, "dup.") {
			continue
		}
		data, err := os.ReadFile(path.Join(m.Layer(testLayer), names[o.Key]))
		if err != nil {
			t.Fatal(err)
		}
		fetched += o.Bytes
		served += int64(len(data))
		read++
	}
	if read < 4 {
		t.Fatalf("only %d images read", read)
	}
	for _, o := range ds.bad() {
		if _, err := os.ReadFile(path.Join(m.Layer(testLayer), names[o.Key])); !errors.Is(err, syscall.EIO) {
			t.Fatalf("read bad %s: %v, want EIO", o.Key, err)
		}
	}

	// featurefs stats --json is the stats file.
	bin := featurefsBin(t)
	raw, err := exec.Command(bin, "stats", "--json", m.Dir).Output()
	if err != nil {
		t.Fatalf("featurefs stats --json: %v", err)
	}
	var st figures.Stats
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, raw)
	}
	if st.Extraction.Completed != int64(read) || st.Store.BytesFetched < fetched || st.BytesServed != served {
		t.Errorf("stats: %d extractions, %d bytes fetched, %d served; read %d images of %d bytes, %d bytes of features",
			st.Extraction.Completed, st.Store.BytesFetched, st.BytesServed, read, fetched, served)
	}
	if st.Errors.BadImage < int64(len(ds.bad())) || st.Errors.Total() != st.Errors.BadImage {
		t.Errorf("errors %+v after reading %d bad objects", st.Errors, len(ds.bad()))
	}
	if st.Device != "cpu" || st.Extraction.MeanBatchSize < 1 || st.Extraction.RatePerSecond <= 0 {
		t.Errorf("device %q, mean batch %v, rate %v", st.Device, st.Extraction.MeanBatchSize, st.Extraction.RatePerSecond)
	}

	// The readable form shows the same figures in its sections.
	out, err := exec.Command(bin, "stats", m.Dir).CombinedOutput()
	if err != nil {
		t.Fatalf("featurefs stats: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{
		`(?m)^extraction$`, `(?m)^queue$`, `(?m)^cache$`, `(?m)^store$`, `(?m)^errors$`, `(?m)^device\n  device +cpu$`,
		fmt.Sprintf(`(?m)^  completed +%d$`, st.Extraction.Completed),
		fmt.Sprintf(`(?m)^  mean batch size +%.2f `, st.Extraction.MeanBatchSize),
		fmt.Sprintf(`(?m)^  bad_image +%d$`, st.Errors.BadImage),
		fmt.Sprintf(`(?m)^  gets +%d \(%d failed\)$`, st.Store.Gets, st.Store.GetErrors),
	} {
		if !regexp.MustCompile(want).MatchString(text) {
			t.Errorf("featurefs stats lacks %s:\n%s", want, text)
		}
	}
	if out, err := exec.Command(bin, "stats", t.TempDir()).CombinedOutput(); err == nil || !strings.Contains(string(out), "not a featurefs mount") {
		t.Errorf("stats of a plain directory: %v: %s", err, out)
	}

	// The metrics endpoint, scraped after the reads (nothing runs in between,
	// so the counters equal the stats file's).
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape --metrics-addr %s: %v", addr, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse metrics: %v\n%s", err, body)
	}
	value := func(name, label, lv string) float64 {
		f, ok := fams[name]
		if !ok {
			t.Errorf("no %s in the scrape", name)
			return -1
		}
		for _, mm := range f.GetMetric() {
			match := label == ""
			for _, l := range mm.GetLabel() {
				match = match || (l.GetName() == label && l.GetValue() == lv)
			}
			if match {
				return mm.GetCounter().GetValue() + mm.GetGauge().GetValue()
			}
		}
		t.Errorf("no %s{%s=%q}", name, label, lv)
		return -1
	}
	checks := []struct {
		name, label, lv string
		want            float64
	}{
		{"featurefs_extractions_total", "outcome", "completed", float64(st.Extraction.Completed)},
		{"featurefs_store_fetched_bytes_total", "", "", float64(st.Store.BytesFetched)},
		{"featurefs_served_bytes_total", "", "", float64(st.BytesServed)},
		{"featurefs_errors_total", "kind", "bad_image", float64(st.Errors.BadImage)},
		{"featurefs_batches_total", "", "", float64(st.Extraction.Batches)},
		{"featurefs_device_info", "device", "cpu", 1},
	}
	for _, c := range checks {
		if got := value(c.name, c.label, c.lv); got != c.want {
			t.Errorf("%s{%s=%q} = %v, stats say %v", c.name, c.label, c.lv, got, c.want)
		}
	}
	// /stats on the metrics address is the same JSON.
	resp, err = http.Get("http://" + addr + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	var st2 figures.Stats
	err = json.NewDecoder(resp.Body).Decode(&st2)
	resp.Body.Close()
	if err != nil || st2.Extraction.Completed != st.Extraction.Completed || st2.Source != st.Source {
		t.Errorf("/stats: %v, completed %d (file %d)", err, st2.Extraction.Completed, st.Extraction.Completed)
	}
}

// TestMetricsAddrInUseFailsTheMount: an address that cannot be listened on
// fails `featurefs mount` with exit code 2 before anything is mounted.
func TestMetricsAddrInUseFailsTheMount(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	mnt := path.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	src := path.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(featurefsBin(t), "mount", "--foreground", "--model", modelName+"="+testenv.Model(t, modelName), "--ort-lib", testenv.ORTLib(t),
		"--cache-dir", path.Join(dir, "cache"), "--device", "cpu", "--metrics-addr", ln.Addr().String(), src, mnt)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "--metrics-addr") {
		t.Errorf("mount with a taken --metrics-addr: %v (want exit 2 naming the flag):\n%s", err, out)
	}
	if isMounted(t, mnt) {
		exec.Command("umount", mnt).Run()
		t.Error("mounted despite the failed metrics address")
	}
}
