package test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// nobody is the uid and gid of another user.
const nobody = 65534

// asNobody runs a command as uid/gid 65534 and returns its output.
func asNobody(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	return cmd.CombinedOutput()
}

// mountOpts returns the per-mount and the superblock options of the mount
// on dir, from /proc/self/mountinfo.
func mountOpts(t *testing.T, dir string) (mnt, super []string) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || unescapeMountinfo(f[4]) != dir {
			continue
		}
		mnt = strings.Split(f[5], ",")
		for i := range f {
			if f[i] == "-" && i+3 < len(f) {
				super = strings.Split(f[i+3], ",")
			}
		}
	}
	if mnt == nil {
		t.Fatalf("%s is not in /proc/self/mountinfo", dir)
	}
	return mnt, super
}

func hasOpt(opts []string, o string) bool {
	for _, x := range opts {
		if x == o {
			return true
		}
	}
	return false
}

// TestReliabilitySecurity checks the mount's security defaults:
//   - it is mounted read-only, nosuid and nodev, with default_permissions;
//     writes of every kind fail with EROFS (TestWritesFailWithEROFS tries
//     each one on every node kind);
//   - files and directories belong to the mounting user (uid, gid) and are
//     read-only (0444 / 0555);
//   - allow_other is off by default: another user is refused even where the
//     mode bits would let it read; with --allow-other it can read, not write;
//   - model names that would leave the features/ tree (.., /, absolute) are
//     refused before mounting (exit 2);
//   - the log (debug level) and the stats file never contain the
//     credentials.
func TestReliabilitySecurity(t *testing.T) {
	d := genDataset(t, "--classes", "1", "--train", "2", "--val", "0")
	srv, env := minioBucket(t, "sec", "", d.Dir)
	// The mount point must be reachable by another user for the refusal to
	// come from the mount itself.
	base, err := os.MkdirTemp("", "featurefs-sec-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	mnt := filepath.Join(base, "mnt")
	for _, p := range []string{base, mnt} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	work := t.TempDir()
	cacheDir, logFile := filepath.Join(work, "cache"), filepath.Join(work, "featurefs.log")
	args := []string{"--endpoint-url", srv.Endpoint, "--log-level", "debug", "--prefetch", "off"}
	m := mountDaemon(t, mnt, cacheDir, logFile, "s3://sec", env, args...)

	perMount, super := mountOpts(t, mnt)
	for _, o := range []string{"ro", "nosuid", "nodev"} {
		if !hasOpt(perMount, o) {
			t.Errorf("mount options %v lack %s", perMount, o)
		}
	}
	if !hasOpt(super, "default_permissions") || hasOpt(super, "allow_other") {
		t.Errorf("superblock options %v: want default_permissions and no allow_other", super)
	}

	file := filepath.Join(m.Layer(testLayer), "train", d.Classes[0], "img0000.npy")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file, filepath.Dir(file), m.Layer(testLayer), m.Path("features", modelName, "layers"), m.Path(".featurefs", "stats"), mnt} {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		want := uint32(0o444)
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			want = 0o555
		}
		if int(st.Uid) != os.Getuid() || int(st.Gid) != os.Getgid() || st.Mode&0o7777 != want {
			t.Errorf("%s: uid %d gid %d mode %o, want the mounting user's %d:%d and %o", p, st.Uid, st.Gid, st.Mode&0o7777, os.Getuid(), os.Getgid(), want)
		}
	}
	if err := os.WriteFile(file, []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write %s: %v, want EROFS", file, err)
	}

	// Another user is refused without --allow-other.
	if out, err := asNobody("cat", file); err == nil || !bytes.Contains(out, []byte("Permission denied")) {
		t.Errorf("another user reading %s without --allow-other: %v %q, want Permission denied", file, err, out)
	}
	if out, err := asNobody("ls", mnt); err == nil {
		t.Errorf("another user listing the mount without --allow-other succeeded: %q", out)
	}

	// Model names that would leave features/ are refused before mounting.
	model := testenv.Model(t, modelName)
	for _, name := range []string{"..", "../evil", "a/b", "/abs", ".hidden"} {
		cmd := exec.Command(featurefsBin(t), "mount", "--model", name+"="+model, "--cache-dir", filepath.Join(work, "c2"),
			"--endpoint-url", srv.Endpoint, "s3://sec", filepath.Join(work, "nomnt"))
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("featurefs mount --model %s=...: %v, want exit 2:\n%s", name, err, out)
		}
	}

	stats, err := os.ReadFile(m.Path(".featurefs", "stats"))
	if err != nil {
		t.Fatal(err)
	}
	m.Unmount(t)

	// With --allow-other another user reads the same bytes, and cannot write.
	m2 := mountDaemon(t, mnt, cacheDir, logFile, "s3://sec", env, append(args, "--allow-other")...)
	if _, super := mountOpts(t, mnt); !hasOpt(super, "allow_other") {
		t.Errorf("--allow-other: superblock options %v lack allow_other", super)
	}
	out, err := asNobody("cat", file)
	if err != nil || !bytes.Equal(out, data) {
		t.Errorf("another user reading %s with --allow-other: %v (%d bytes, want %d)", file, err, len(out), len(data))
	}
	if out, err := asNobody("touch", filepath.Join(filepath.Dir(file), "new.npy")); err == nil {
		t.Errorf("another user created a file with --allow-other: %q", out)
	}
	m2.Unmount(t)

	assertNoSecrets(t, []string{srv.AccessKey, srv.SecretKey}, []string{logFile}, map[string]string{"stats": string(stats)})
}
