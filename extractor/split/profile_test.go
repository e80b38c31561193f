package split

import (
	"errors"
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
