package split

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestProfileSaveLoad(t *testing.T) {
	p := synthProfile(HostID(), "cuda:0", 2)
	p.Threads, p.FreeMemory = 3, 8<<30
	p.Created = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	file := filepath.Join(t.TempDir(), "sub", "profile-x.json")
	if err := SaveProfile(file, p); err != nil {
		t.Fatal(err)
	}
	got, err := LoadProfile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, p) {
		t.Errorf("loaded %+v, saved %+v", got, p)
	}
	// The rename leaves no temporary file behind.
	if files, _ := os.ReadDir(filepath.Dir(file)); len(files) != 1 {
		t.Errorf("files after saving: %v", files)
	}
	// The file format: the JSON field names other versions read.
	b, _ := os.ReadFile(file)
	for _, key := range []string{`"schema"`, `"digest"`, `"decode_seconds"`, `"free_memory"`, `"act_bytes"`, `"cum_seconds"`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("saved profile lacks %s:\n%s", key, b)
		}
	}

	if _, err := LoadProfile(filepath.Join(t.TempDir(), "none.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want os.ErrNotExist", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	for name, body := range map[string]string{"damaged": "{", "no layers": `{"schema":1}`} {
		if err := os.WriteFile(bad, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadProfile(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%s file: %v, want an error naming the file", name, err)
		}
	}
}

func TestProfileValidate(t *testing.T) {
	if err := synthProfile("h", "cpu", 1).Validate(); err != nil {
		t.Fatalf("synthetic profile: %v", err)
	}
	for name, spoil := range map[string]func(p *Profile){
		"no layers":       func(p *Profile) { p.Layers = nil },
		"index":           func(p *Profile) { p.Layers[2].Index = 5 },
		"negative time":   func(p *Profile) { p.Layers[1].Seconds = -1 },
		"no bytes":        func(p *Profile) { p.Layers[3].Bytes = 0 },
		"not cumulative":  func(p *Profile) { p.Layers[4].CumSeconds *= 2 },
		"negative decode": func(p *Profile) { p.DecodeSeconds = -0.1 },
	} {
		p := synthProfile("h", "cpu", 1)
		spoil(p)
		if err := p.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestHostID(t *testing.T) {
	if a, b := HostID(), HostID(); a == "" || a != b {
		t.Errorf("HostID %q then %q: want one non-empty id", a, b)
	}
}

// Two CPU profiles of one machine share processors unless their
// processes' CPU lists are disjoint: the two sides of a split each given
// their own cores (cpusets) are two hosts to the cost model, which then
// takes the slowest stage rather than the sum of both sides' compute.
func TestSharesCPUs(t *testing.T) {
	p := func(host, cpus string) *Profile { return &Profile{Host: host, CPUs: cpus} }
	for _, c := range []struct {
		a, b *Profile
		want bool
	}{
		{p("h", "0"), p("h", "1"), false},
		{p("h", "0-1"), p("h", "1"), true},
		{p("h", "0,2-3"), p("h", "1,4-7"), false},
		{p("h", "0,2-3"), p("h", "3"), true},
		{p("h", ""), p("h", "1"), true}, // not known: every processor
		{p("h", "0"), p("g", "0"), false},
		{p("", "0"), p("", "0"), false},
	} {
		if got := c.a.SharesCPUs(c.b); got != c.want || c.b.SharesCPUs(c.a) != c.want {
			t.Errorf("%+v and %+v: shares %v, want %v", c.a, c.b, got, c.want)
		}
	}
	server, client := synthProfile("h", "cpu", 1), synthProfile("h", "cpu", 1)
	server.CPUs, client.CPUs = "0", "1"
	if cm, err := NewCostModel(server, client); err != nil || cm.SharedCompute {
		t.Errorf("disjoint cpusets: SharedCompute %v (%v), want false", cm != nil && cm.SharedCompute, err)
	}
	client.CPUs = "0-1"
	if cm, err := NewCostModel(server, client); err != nil || !cm.SharedCompute {
		t.Errorf("overlapping cpusets: SharedCompute false (%v), want true", err)
	}
}

func TestParseCPUList(t *testing.T) {
	for s, want := range map[string][]int{"0": {0}, "0-3": {0, 1, 2, 3}, "1,3-4": {1, 3, 4}, " 2 ": {2}} {
		got, ok := ParseCPUList(s)
		if !ok || len(got) != len(want) {
			t.Errorf("%q: %v %v, want %v", s, got, ok, want)
			continue
		}
		for _, c := range want {
			if !got[c] {
				t.Errorf("%q: %v lacks %d", s, got, c)
			}
		}
	}
	for _, s := range []string{"", "a", "3-1", "-1", "0-", "1,,2", "0-99999999", strings.Repeat("0,", 2000) + "0"} {
		if _, ok := ParseCPUList(s); ok {
			t.Errorf("%q parsed", s)
		}
	}
}

// FuzzParseCPUList: a CPU list comes from a server's profile too; no
// input panics, and an accepted list holds only CPUs under the bound.
func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0", "0-3,6", "", "1-0", "8191", "0-8192"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cpus, ok := ParseCPUList(s)
		if !ok {
			return
		}
		for c := range cpus {
			if c < 0 || c >= maxCPUs {
				t.Fatalf("%q gave CPU %d", s, c)
			}
		}
	})
}

// A quota is read from cgroup v2's cpu.max and v1's two files; none
// ("max", -1) is 0.
func TestReadQuota(t *testing.T) {
	dir := t.TempDir()
	write := func(name, v string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cpu.max", "50000 100000")
	if q, ok := readQuota(dir, "cpu.max"); !ok || q != 0.5 {
		t.Errorf("cpu.max 50000 100000: %v %v", q, ok)
	}
	write("cpu.max", "max 100000")
	if q, ok := readQuota(dir, "cpu.max"); !ok || q != 0 {
		t.Errorf("cpu.max max: %v %v", q, ok)
	}
	write("cpu.cfs_quota_us", "150000")
	write("cpu.cfs_period_us", "100000")
	if q, ok := readQuota(dir, ""); !ok || q != 1.5 {
		t.Errorf("v1 150000/100000: %v %v", q, ok)
	}
	write("cpu.cfs_quota_us", "-1")
	if q, ok := readQuota(dir, ""); !ok || q != 0 {
		t.Errorf("v1 -1: %v %v", q, ok)
	}
	if _, ok := readQuota(filepath.Join(dir, "none"), "cpu.max"); ok {
		t.Error("a missing file read as a quota")
	}
}

func TestMonotone(t *testing.T) {
	for _, c := range []struct{ in, want []float64 }{
		{nil, nil},
		{[]float64{1, 2, 3}, []float64{1, 2, 3}},
		{[]float64{1, 4, 2, 3}, []float64{1, 3, 3, 3}},
		{[]float64{3, 2, 1}, []float64{2, 2, 2}},
		{[]float64{0.78, 1.61, 10.55, 5, 6, 6.5, 11}, []float64{0.78, 1.61, 7.0125, 7.0125, 7.0125, 7.0125, 11}},
		{[]float64{-1, 2}, []float64{0, 2}},
	} {
		got := Monotone(c.in)
		if len(got) != len(c.in) {
			t.Fatalf("Monotone(%v) = %v", c.in, got)
		}
		for i := range got {
			if math.Abs(got[i]-c.want[i]) > 1e-9 {
				t.Errorf("Monotone(%v) = %v, want %v", c.in, got, c.want)
				break
			}
		}
	}
}
