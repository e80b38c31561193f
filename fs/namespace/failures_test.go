package namespace

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The record is bounded: the oldest failure goes first and is counted; a
// file that fails again moves to the newest; a success removes it.
func TestFailedFilesBounded(t *testing.T) {
	ff := newFailedFiles(3)
	now := time.Unix(0, 0)
	for i := range 5 {
		ff.add(fmt.Sprintf("d/%d.npy", i), fmt.Sprintf("d/%d.jpg", i), "bad", now)
	}
	ff.add("d/2.npy", "d/2.jpg", "worse", now)
	ff.add("d/5.npy", "d/5.jpg", "bad", now)
	got := ff.snapshot()
	var files []string
	for _, f := range got.Files {
		files = append(files, f.File+"="+f.Error)
	}
	if strings.Join(files, " ") != "d/2.npy=worse d/4.npy=bad d/5.npy=bad" || got.Dropped != 3 {
		t.Errorf("after 7 failures of 6 files, bound 3: %v, %d dropped", files, got.Dropped)
	}
	ff.clear("d/4.npy")
	ff.clear("d/none.npy")
	if got := ff.snapshot(); len(got.Files) != 2 || got.Files[0].File != "d/2.npy" || got.Files[1].File != "d/5.npy" {
		t.Errorf("after clearing d/4.npy: %+v", got.Files)
	}
}
