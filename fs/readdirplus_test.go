package fs

import (
	"fmt"
	"os"
	"testing"

	"github.com/featurefs/featurefs/extractor/api"
)

// TestReaddirPlusAnswersFromTheEntry lists a directory with attributes (as
// ls -l does): READDIRPLUS hands the kernel each entry's attributes from the
// entry just listed, so no name is looked up again (the lookup counter
// stays), and the sizes are the layer's.
func TestReaddirPlusAnswersFromTheEntry(t *testing.T) {
	const n = 60
	b := newFakeBucket(1000)
	for i := range n {
		b.put(fmt.Sprintf("d/%02d.jpg", i), []byte(fmt.Sprint("img", i)))
	}
	b.put("d/sub/x.jpg", []byte("x"))
	e := testMount(t, b)
	l := e.x.Models()[0].Layers[2]
	want := api.NPYSize(l.Shape, e.x.DType())
	dir := e.path("features", "tiny", l.Name, "d")
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
	before := e.fs.stats.lookups.Load()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(des) != n+1 {
		t.Fatalf("%d entries, want %d", len(des), n+1)
	}
	for _, de := range des {
		fi, err := de.Info()
		if err != nil {
			t.Fatal(err)
		}
		if !fi.IsDir() && fi.Size() != want {
			t.Errorf("%s: size %d, want %d", de.Name(), fi.Size(), want)
		}
	}
	if got := e.fs.stats.lookups.Load() - before; got != 0 {
		t.Errorf("ls -l of %d entries looked %d names up again, want 0", n+1, got)
	}
}
