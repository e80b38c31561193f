package remote

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	featurefs "github.com/featurefs/featurefs/fs"
	"github.com/featurefs/featurefs/fs/bucket"
)

// TestRefusedTokenIsEACCES: when the servers start refusing the mount's
// token (their token was changed), reads and listings of the mount fail
// with EACCES, which says what happened, not EIO, while cached features
// still read; the client's errors match ErrUnauthorized and
// bucket.ErrAccessDenied. Through the kernel.
func TestRefusedTokenIsEACCES(t *testing.T) {
	ts := startServer(t, map[string]string{"a/x.jpg": "image x", "a/z.jpg": "image z", "b/y.jpg": "image y"}, nil)
	cfg := ts.cfg
	cfg.Token = "a-new-token"
	rotated, err := NewServer(ts.Pipeline(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var refuse atomic.Bool
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refuse.Load() {
			rotated.ServeHTTP(w, r)
			return
		}
		ts.Server.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	c := dial(t, ClientConfig{URLs: []string{hs.URL}})
	tree, _, _ := mountTree(t, c)
	t.Cleanup(func() { tree.Close() })
	mnt := t.TempDir()
	srv, err := tree.Mount(mnt, featurefs.MountOptions{FsName: "remote-test", DirectMount: true})
	if err != nil {
		t.Fatalf("mount: %v (the tests need /dev/fuse and root)", err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	layer := filepath.Join(mnt, "features", "tiny", "layer0")
	if _, err := os.ReadDir(filepath.Join(layer, "a")); err != nil {
		t.Fatalf("listing before the token is refused: %v", err)
	}
	cached, err := os.ReadFile(filepath.Join(layer, "a", "x.npy"))
	if err != nil {
		t.Fatalf("read before the token is refused: %v", err)
	}

	refuse.Store(true)
	if _, err := os.ReadFile(filepath.Join(layer, "a", "z.npy")); !errors.Is(err, syscall.EACCES) {
		t.Errorf("read with a refused token: %v, want EACCES", err)
	}
	if _, err := os.ReadDir(filepath.Join(layer, "b")); !errors.Is(err, syscall.EACCES) {
		t.Errorf("listing with a refused token: %v, want EACCES", err)
	}
	// What the mount has cached still reads.
	if got, err := os.ReadFile(filepath.Join(layer, "a", "x.npy")); err != nil || string(got) != string(cached) {
		t.Errorf("cached feature with a refused token: %v (%d bytes, want %d)", err, len(got), len(cached))
	}
	_, err = c.Extractor().Extract(context.Background(), featureReq("a/x.jpg", 0, ""))
	if !errors.Is(err, ErrUnauthorized) || !errors.Is(err, bucket.ErrAccessDenied) {
		t.Errorf("Extract with a refused token: %v, want ErrUnauthorized matching bucket.ErrAccessDenied", err)
	}
	_, err = c.Bucket().List(context.Background(), "b/", "")
	if !errors.Is(err, ErrUnauthorized) || !errors.Is(err, bucket.ErrAccessDenied) {
		t.Errorf("List with a refused token: %v, want ErrUnauthorized matching bucket.ErrAccessDenied", err)
	}
	if got, want := ErrUnauthorized.Error(), "feature server refused the token (401)"; got != want {
		t.Errorf("ErrUnauthorized says %q, want %q", got, want)
	}
}
