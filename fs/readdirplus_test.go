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

// TestWalkReadsNamesWithoutNodes walks a tree as os.walk and DatasetFolder
// do (a directory, then each of its subdirectories): a subdirectory read in
// the walk hands its files out without attributes, so that the walk costs
// no node per file, where a directory read on its own hands out its first
// plusFirst entries with them. A reader that then stats the walked files
// gets the layer's sizes (looked up from the listing).
func TestWalkReadsNamesWithoutNodes(t *testing.T) {
	const n = 100
	b := newFakeBucket(1000)
	for _, c := range []string{"a", "b"} {
		for i := range n {
			b.put(fmt.Sprintf("w/%s/%03d.jpg", c, i), []byte(fmt.Sprint("img", c, i)))
		}
	}
	e := testMount(t, b)
	l := e.x.Models()[0].Layers[2]
	want := api.NPYSize(l.Shape, e.x.DType())
	root := e.path("features", "tiny", l.Name, "w")
	// Alone: b's directory read with no walk of w/ before it.
	before := e.fs.budget.nodes.Load()
	if des, err := os.ReadDir(root + "/b"); err != nil || len(des) != n {
		t.Fatalf("ReadDir(b): %d entries, %v", len(des), err)
	}
	if got := e.fs.budget.nodes.Load() - before; got < n/2 {
		t.Fatalf("a directory read alone added %d nodes, want its entries' (%d)", got, n)
	}
	// A walk: w/, then a/.
	before = e.fs.budget.nodes.Load()
	if _, err := os.ReadDir(root); err != nil {
		t.Fatal(err)
	}
	des, err := os.ReadDir(root + "/a")
	if err != nil || len(des) != n {
		t.Fatalf("ReadDir(a): %d entries, %v", len(des), err)
	}
	if got := e.fs.budget.nodes.Load() - before; got > 4 {
		t.Errorf("a walk of a %d-file directory added %d nodes, want at most its directories'", n, got)
	}
	for _, de := range des {
		fi, err := de.Info()
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != want {
			t.Fatalf("%s: size %d, want %d", de.Name(), fi.Size(), want)
		}
	}
}
