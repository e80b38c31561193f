package test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// imageCommitTime is the commit time of the checkouts
// TestImageSameFromTwoCheckouts makes: make image's SOURCE_DATE_EPOCH.
const imageCommitTime = 1700000000

// checkoutTree copies the repository's files as this tree has them (the
// tracked ones and those git would add, edits included) into dir and
// commits them there with a fixed author, committer and time.
func checkoutTree(t *testing.T, root, dir string, files []string) {
	t.Helper()
	for _, f := range files {
		src := filepath.Join(root, f)
		st, err := os.Lstat(src)
		if os.IsNotExist(err) {
			continue // deleted in this tree, not yet in git
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if st.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, dst); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if !st.Mode().IsRegular() {
			continue // a submodule's directory: none here
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, st.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	stamp := "@" + strconv.Itoa(imageCommitTime) + " +0000"
	for _, args := range [][]string{
		{"init", "-q"},
		{"add", "-A"},
		{"-c", "user.name=featurefs", "-c", "user.email=test@featurefs.invalid", "-c", "commit.gpgsign=false", "commit", "-q", "-m", "tree"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_DATE="+stamp, "GIT_COMMITTER_DATE="+stamp)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, b)
		}
	}
}

// TestImageSameFromTwoCheckouts: `make image` builds the same bytes from
// the same commit checked out at two paths of different lengths (this
// tree committed in one, cloned to the other; the image's binary is built
// with -trimpath: neither path is in it), and the image's creation time is
// the commit's (SOURCE_DATE_EPOCH from git log when not set), not 1970.
func TestImageSameFromTwoCheckouts(t *testing.T) {
	root := testenv.RepoRoot(t)
	ort := testenv.ORTLib(t)
	testenv.GoTool(t)
	ls := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	ls.Dir = root
	out, err := ls.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	files := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	base := t.TempDir()
	dirs := []string{filepath.Join(base, "a"), filepath.Join(base, "a-checkout-at-a-much-longer-path", "featurefs")}
	sums := make([][32]byte, len(dirs))
	// One snapshot of this tree, cloned: the same commit at both paths
	// (others may edit this tree while the images build).
	checkoutTree(t, root, dirs[0], files)
	if b, err := exec.Command("git", "clone", "-q", dirs[0], dirs[1]).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, b)
	}
	for i, dir := range dirs {
		start := time.Now()
		cmd := exec.Command("make", "image")
		cmd.Dir = dir
		cmd.Env = []string{"FEATUREFS_ORT_LIB=" + ort}
		for _, kv := range os.Environ() {
			// The commit's time, not the caller's; GOFLAGS=-trimpath
			// or the like would hide what the Makefile does.
			if !strings.HasPrefix(kv, "SOURCE_DATE_EPOCH=") && !strings.HasPrefix(kv, "GOFLAGS=") && !strings.HasPrefix(kv, "FEATUREFS_ORT_LIB=") && !strings.HasPrefix(kv, "MAKEFLAGS=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make image in %s: %v\n%s", dir, err, lastBytes(string(b), 4000))
		}
		t.Logf("make image in %s: %v", dir, time.Since(start).Round(time.Second))
		archive, err := os.ReadFile(filepath.Join(dir, "bin", "featurefs-image.tar"))
		if err != nil {
			t.Fatal(err)
		}
		sums[i] = sha256.Sum256(archive)
		if i == 0 {
			checkCreated(t, archive)
		}
		// The binary the image holds (mkimage reads it from bin/).
		if b, err := os.ReadFile(filepath.Join(dir, "bin", "featurefs-image-bin")); err == nil && bytes.Contains(b, []byte(dir)) {
			t.Errorf("bin/featurefs-image-bin holds its checkout's path %s (built without -trimpath)", dir)
		}
	}
	if sums[0] != sums[1] {
		t.Errorf("make image from one commit at two paths: sha256 %x and %x; want one image", sums[0], sums[1])
	}
}

// checkCreated checks that the image's config and history are dated at
// the checkouts' commit time.
func checkCreated(t *testing.T, archive []byte) {
	t.Helper()
	files := ociFiles(t, archive)
	var index struct {
		Manifests []ociDesc `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, files["index.json"])
	}
	var manifest struct {
		Config ociDesc `json:"config"`
	}
	if err := json.Unmarshal(blob(t, files, index.Manifests[0]), &manifest); err != nil {
		t.Fatal(err)
	}
	var config struct {
		Created string `json:"created"`
		History []struct {
			Created string `json:"created"`
		} `json:"history"`
	}
	if err := json.Unmarshal(blob(t, files, manifest.Config), &config); err != nil {
		t.Fatal(err)
	}
	want := time.Unix(imageCommitTime, 0).UTC().Format(time.RFC3339)
	if config.Created != want || len(config.History) != 1 || config.History[0].Created != want {
		t.Errorf("image created %q (history %+v); want the commit's time %s", config.Created, config.History, want)
	}
}
