package fs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
)

// TestMetadataBudgetHolds lists, stats and reads more entries through the
// kernel than the metadata budget allows (8 directories of 500 images
// against a budget of 512 nodes' worth): the coldest listings are dropped
// and the kernel told to forget entries, the stats' figure comes back under
// the budget, and a second full scan still lists, stats and reads every
// entry right.
func TestMetadataBudgetHolds(t *testing.T) {
	const dirs, perDir = 8, 500
	const budget = 512 * nodeBytes
	b := newFakeBucket(200)
	for d := range dirs {
		for i := range perDir {
			b.put(fmt.Sprintf("c%d/%04d.jpg", d, i), []byte(fmt.Sprintf("image %d/%d", d, i)))
		}
	}
	e := testMount(t, b, func(c *testConfig) { c.MetadataBytes = budget })
	l := e.x.Models()[0].Layers[0]
	size := api.NPYSize(l.Shape, e.x.DType())
	root := e.path("features", "tiny", l.Name)

	scan := func(round int) {
		t.Helper()
		for d := range dirs {
			dir := filepath.Join(root, fmt.Sprintf("c%d", d))
			got := names(t, dir)
			if len(got) != perDir {
				t.Fatalf("round %d: %s lists %d names, want %d", round, dir, len(got), perDir)
			}
			for _, n := range got {
				fi, err := os.Stat(filepath.Join(dir, n))
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				if fi.Size() != size {
					t.Fatalf("round %d: %s/%s has size %d, want %d", round, dir, n, fi.Size(), size)
				}
			}
			for _, i := range []int{0, perDir / 2, perDir - 1} {
				p := filepath.Join(dir, fmt.Sprintf("%04d.npy", i))
				data, err := os.ReadFile(p)
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				if want := expectedNPY(l, []byte(fmt.Sprintf("image %d/%d", d, i)), e.x.DType()); !bytes.Equal(data, want) {
					t.Fatalf("round %d: %s: wrong content", round, p)
				}
			}
		}
	}
	settled := func() {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			st := e.fs.Stats().FS
			if st.MetadataBytes <= st.MetadataMaxBytes {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("metadata %d bytes (listings %d, %d nodes) still over the budget %d after 30s",
					st.MetadataBytes, st.ListingBytes, st.KernelNodes, st.MetadataMaxBytes)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	scan(1)
	settled()
	st := readStatsFile(t, e).FS
	if st.MetadataMaxBytes != budget || st.MetadataBytes > budget || st.MetadataBytes != st.ListingBytes+st.NodeBytes {
		t.Errorf("stats: metadata %d bytes (listings %d + nodes %d) of %d; want at most the budget %d",
			st.MetadataBytes, st.ListingBytes, st.NodeBytes, st.MetadataMaxBytes, budget)
	}
	if st.ListingsDropped == 0 || st.KernelForgets == 0 {
		t.Errorf("after listing %d entries with room for 512: %d listings dropped, %d kernel entries forgotten; want both > 0",
			dirs*perDir, st.ListingsDropped, st.KernelForgets)
	}
	if st.KernelNodes*nodeBytes != st.NodeBytes {
		t.Errorf("%d nodes count %d bytes, want %d each", st.KernelNodes, st.NodeBytes, nodeBytes)
	}
	lists := b.lists.Load()

	scan(2)
	settled()
	if b.lists.Load() == lists {
		t.Error("the second scan read no listing again: nothing was dropped")
	}
}
