package fs

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/fs/archive"
	"github.com/featurefs/featurefs/fs/bucket"
)

// TestArchiveIndexCountsInTheBudget (issue 36 item 8): the archive
// indexes a mount keeps in memory count in its metadata budget and in
// fs.metadata_bytes (fs.archive_index_bytes): an index of 2,000 members
// with 800-byte paths (about 1.7 MB) passes a 1 MiB budget on its own.
// At ca82ffd metadata_bytes said nothing of it (listings and nodes only).
func TestArchiveIndexCountsInTheBudget(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	long := strings.Repeat("d", 200) + "/"
	for i := range 2000 {
		if err := tw.WriteHeader(&tar.Header{Name: long + fmt.Sprintf("%0590d.jpg", i), Mode: 0o644, Typeflag: tar.TypeReg, Size: 1}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte{1})
	}
	tw.Close()
	if err := os.WriteFile(filepath.Join(dir, "big.tar"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	lb, err := bucket.Open(context.Background(), dir, bucket.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	ab := archive.Wrap(lb, archive.Config{Formats: archive.Formats, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}).(*archive.Bucket)
	t.Cleanup(func() { ab.Close() })
	f, err := newTree(t, testConfig{pipelineConfig: pipelineConfig{
		Bucket: ab, Extractor: newFakeExtractor(), Cache: newFakeCache(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MetadataTTL: time.Hour, NegativeTTL: time.Minute,
		ReadTimeout: time.Minute, Now: time.Now, Archives: archive.Formats,
	}, Config: Config{MetadataBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.ns.Over() {
		t.Fatal("over the budget before any listing")
	}
	if _, err := ab.List(context.Background(), "big.tar/"+long, ""); err != nil {
		t.Fatal(err)
	}
	st := f.Stats()
	idx := ab.Stats().IndexBytes
	if idx < 2000*800 || st.FS.ArchiveIndexBytes != idx || st.FS.MetadataBytes < idx {
		t.Errorf("index of 2,000 800-byte paths: index_bytes %d, fs.archive_index_bytes %d, fs.metadata_bytes %d: want the index in both figures",
			idx, st.FS.ArchiveIndexBytes, st.FS.MetadataBytes)
	}
	if !f.ns.Over() {
		t.Errorf("a %d-byte index kept against a 1 MiB metadata budget: the budget is not over", idx)
	}
}
