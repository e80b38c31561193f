package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// configOf returns the image config of an archive Build wrote.
func configOf(t *testing.T, archive []byte) map[string]any {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = b
	}
	var index struct {
		Manifests []struct{ Digest string } `json:"manifests"`
	}
	var manifest struct {
		Config struct{ Digest string } `json:"config"`
	}
	var config map[string]any
	blob := func(d string) []byte { return files["blobs/sha256/"+strings.TrimPrefix(d, "sha256:")] }
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v", err)
	}
	if err := json.Unmarshal(blob(index.Manifests[0].Digest), &manifest); err != nil {
		t.Fatalf("manifest: %v", err)
	}
	if err := json.Unmarshal(blob(manifest.Config.Digest), &config); err != nil {
		t.Fatalf("config: %v", err)
	}
	return config
}

// TestCreatedIsSourceDateEpoch: the image's config and its history are
// dated SOURCE_DATE_EPOCH (make image sets it to the commit's time), 1970
// only without it; a malformed one is refused.
func TestCreatedIsSourceDateEpoch(t *testing.T) {
	es := []entry{{name: "/usr/local/bin/featurefs", typ: tar.TypeReg, mode: 0o755, data: []byte("bin")}}
	for env, want := range map[string]string{"1700000000": "2023-11-14T22:13:20Z", "": "1970-01-01T00:00:00Z"} {
		t.Setenv("SOURCE_DATE_EPOCH", env)
		epoch, err := sourceEpoch()
		if err != nil {
			t.Fatal(err)
		}
		b, err := Build(es, epoch)
		if err != nil {
			t.Fatal(err)
		}
		c := configOf(t, b)
		hist, _ := c["history"].([]any)
		if c["created"] != want || len(hist) != 1 || hist[0].(map[string]any)["created"] != want {
			t.Errorf("SOURCE_DATE_EPOCH=%q: created %v, history %v; want %s", env, c["created"], hist, want)
		}
	}
	t.Setenv("SOURCE_DATE_EPOCH", "yesterday")
	if _, err := sourceEpoch(); err == nil {
		t.Error("SOURCE_DATE_EPOCH=yesterday taken")
	}
}
