package fs

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/featurefs/featurefs/fs/namespace"
)

// TestFailuresFile: .featurefs/failures names the object behind each
// feature file whose read failed (a plain name, one whose short name is
// taken by a sibling, a hashed one for a key too long for a name) and the
// mount's reason, without the key; files that read well are not listed;
// reading it asks the store nothing.
func TestFailuresFile(t *testing.T) {
	b := newFakeBucket(1000)
	long := "d/x" + strings.Repeat("y", 260) + ".jpg"
	b.put("d/good.jpg", []byte("img good"))
	b.put("d/a.png", []byte("img a"))
	for _, k := range []string{"d/bad.jpg", "d/a.jpg", long} {
		b.put(k, []byte("BAD: not a jpeg "+k))
	}
	e := testMount(t, b)
	dir := e.path("features", "tiny", "layer0", "d")
	failed := 0
	for _, name := range names(t, dir) {
		_, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, syscall.EIO) {
			failed++
		} else if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
	}
	if failed != 3 {
		t.Fatalf("%d files failed, want 3", failed)
	}
	lists := b.lists.Load()
	raw, err := os.ReadFile(e.path(".featurefs", FailuresFile))
	if err != nil {
		t.Fatal(err)
	}
	if n := b.lists.Load() - lists; n != 0 {
		t.Errorf("reading %s listed the bucket %d times", FailuresFile, n)
	}
	var got namespace.Failures
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("%s: %v\n%s", FailuresFile, err, raw)
	}
	byKey := map[string]namespace.FailedFile{}
	for _, f := range got.Files {
		byKey[f.Key] = f
	}
	for _, k := range []string{"d/bad.jpg", "d/a.jpg", long} {
		f, ok := byKey[k]
		if !ok {
			t.Errorf("%s lacks %s: %+v", FailuresFile, k, got.Files)
			continue
		}
		if f.Error == "" || strings.Contains(f.Error, k) {
			t.Errorf("%s: reason %q is empty or repeats the key", k, f.Error)
		}
		if _, err := os.Stat(filepath.Join(dir, filepath.Base(f.File))); err != nil || !strings.HasPrefix(f.File, "d/") {
			t.Errorf("%s: file %q is not its name under the layer directory: %v", k, f.File, err)
		}
	}
	if byKey["d/bad.jpg"].File != "d/bad.npy" || byKey["d/a.jpg"].File != "d/a.jpg.npy" || !strings.Contains(byKey[long].File, "~") || len(filepath.Base(byKey[long].File)) > 255 {
		t.Errorf("files: %+v", got.Files)
	}
	if len(got.Files) != 3 || got.Dropped != 0 {
		t.Errorf("%d files listed (%d dropped), want the 3 that failed", len(got.Files), got.Dropped)
	}
}
