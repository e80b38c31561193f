package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// TestErrorReasonsNameTheKeyOnce: a truncated JPEG's key shows once on each
// line that reports it (it used to read "d/trunc.jpg: d/trunc.jpg: cannot
// use as image ..."): in the stats file's recent errors, `featurefs stats`,
// `featurefs warm`'s failure list, the mount's log, and in near-data mode
// the server's log, the remote mount's log and its stats. And `featurefs
// warm` on a path that is not a mount, or on a layer that does not exist,
// exits 2 with the error and no "0 of 0 done" summary.
func TestErrorReasonsNameTheKeyOnce(t *testing.T) {
	work := t.TempDir()
	src := filepath.Join(work, "src")
	writeJPEG(t, filepath.Join(src, "d", "good.jpg"), 64, 48, 1)
	writeJPEG(t, filepath.Join(work, "full.jpg"), 64, 48, 2)
	whole, err := os.ReadFile(filepath.Join(work, "full.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "d", "trunc.jpg"), whole[:len(whole)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	srv, env := minioBucket(t, "keys", "", src)
	source := "s3://keys"

	// What each report says about d/trunc.jpg, line by line.
	reports := map[string]string{}
	check := func() {
		t.Helper()
		for what, text := range reports {
			found := false
			for _, l := range lines(text) {
				if !strings.Contains(l, "trunc.jpg") {
					continue
				}
				found = true
				if n := strings.Count(l, "d/trunc.jpg"); n != 1 {
					t.Errorf("%s names d/trunc.jpg %d times in one line: %s", what, n, l)
				}
			}
			if !found {
				t.Errorf("%s does not name d/trunc.jpg:\n%s", what, text)
			}
		}
	}
	recentErrors := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			RecentErrors []struct{ Key, Error string } `json:"recent_errors"`
		}
		if err := json.Unmarshal(bytes.TrimSpace(b), &st); err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		for _, e := range st.RecentErrors {
			fmt.Fprintf(&out, "%s: %s\n", e.Key, e.Error)
		}
		return out.String()
	}

	// Embedded mount.
	m := testMount(t, mountConfig{Source: source, Env: env, Args: []string{"--endpoint-url", srv.Endpoint, "--prefetch", "off"}})
	if _, err := os.ReadFile(filepath.Join(m.Layer("layer0"), "d", "trunc.npy")); err == nil {
		t.Fatalf("reading the truncated image's feature succeeded")
	}
	reports["the stats file's recent errors"] = recentErrors(m.Path(".featurefs", "stats"))
	reports["featurefs stats"] = runCLI(t, time.Minute, nil, "stats", m.Dir).Stdout
	w := runCLI(t, 3*time.Minute, nil, "warm", "--progress-interval", "1h", filepath.Join(m.Layer("layer0"), "d"))
	if w.Code != 1 || !strings.Contains(w.Stdout, "1 of 2 done") {
		t.Errorf("warm over one good and one truncated image: want exit 1 and 1 of 2 done:\n%s", w)
	}
	reports["featurefs warm's failure list"] = w.Stdout

	// Usage errors: no summary.
	for _, p := range []string{t.TempDir(), m.Layer("layer99"), m.Path("features", modelName)} {
		r := runCLI(t, time.Minute, nil, "warm", p)
		if r.Code != 2 || r.Stdout != "" || len(lines(r.Stderr)) != 1 {
			t.Errorf("warm %s: want exit 2, nothing on stdout and one error line:\n%s", p, r)
		}
	}
	m.Unmount(t)
	reports["the mount's log"] = tail(m.Log, 1<<20)

	// Near-data: the server's log, the remote mount's log and stats.
	s := startServe(t, source, env, "--endpoint-url", srv.Endpoint)
	rm := testMount(t, mountConfig{Args: s.remoteArgs("--prefetch", "off"), NoModel: true})
	if _, err := os.ReadFile(filepath.Join(rm.Layer("layer0"), "d", "trunc.npy")); err == nil {
		t.Fatalf("reading the truncated image's feature through the server succeeded")
	}
	reports["the remote mount's recent errors"] = recentErrors(rm.Path(".featurefs", "stats"))
	rm.Unmount(t)
	reports["the remote mount's log"] = tail(rm.Log, 1<<20)
	reports["the server's log"] = s.Log()
	check()
}

// TestRemoteMountMessages: `mount --remote` says in one line what is wrong:
// with no token at all, that none was given and how to give one (it used to
// say the server refused the token); at a server that is not a featurefs
// server (an HTML page, MinIO's S3 XML), that it is not one, with the
// status code, and without the server's body (it used to carry the whole
// page). Each exits 5.
func TestRemoteMountMessages(t *testing.T) {
	work := t.TempDir()
	src := filepath.Join(work, "src")
	writeJPEG(t, filepath.Join(src, "a.jpg"), 64, 48, 1)
	s := startServe(t, src, nil)

	html := strings.Repeat("<p>nothing to see here</p>\n", 200)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	web := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if r.URL.Path == "/v1/models" && r.URL.Query().Get("ok") == "" {
			w.WriteHeader(http.StatusNotFound)
		}
		fmt.Fprintf(w, "<!DOCTYPE html>\n<html><body>\n%s</body></html>\n", html)
	})}
	go web.Serve(ln)
	defer web.Close()
	minio := testenv.StartMinIO(t)

	mount := func(url string, args ...string) cliResult {
		mnt := filepath.Join(t.TempDir(), "mnt")
		if err := os.Mkdir(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		all := append([]string{"mount", "--foreground", "--remote", url, "--cache-dir", filepath.Join(t.TempDir(), "c"),
			"--log-file", filepath.Join(t.TempDir(), "log")}, args...)
		r := runCLI(t, 2*time.Minute, nil, append(all, mnt)...)
		if isMounted(t, mnt) {
			t.Errorf("mount --remote %s mounted", url)
		}
		return r
	}
	for _, c := range []struct {
		name, url string
		want      []string
		not       []string
	}{
		{"no token", s.URL, []string{"none was given", "--remote-token-file", "FEATUREFS_TOKEN", s.URL}, []string{"refused"}},
		{"HTML server", "http://" + ln.Addr().String(), []string{"not a featurefs server", "HTTP 404", "text/html", ln.Addr().String()}, []string{"<html", "nothing to see"}},
		{"MinIO", minio.Endpoint, []string{"not a featurefs server", "HTTP 4", "xml", minio.Endpoint}, []string{"<?xml", "<Error>", "<Code>"}},
	} {
		r := mount(c.url)
		if r.Code != 5 || len(lines(r.Stderr)) != 1 {
			t.Errorf("%s: want exit 5 and one line on stderr:\n%s", c.name, r)
		}
		for _, w := range c.want {
			if !strings.Contains(r.Stderr, w) {
				t.Errorf("%s: stderr lacks %q:\n%s", c.name, w, r.Stderr)
			}
		}
		for _, w := range c.not {
			if strings.Contains(r.Stderr, w) {
				t.Errorf("%s: stderr has %q:\n%s", c.name, w, r.Stderr)
			}
		}
	}
	// A token given but wrong is still "refused" (and not "none given").
	bad := filepath.Join(work, "bad-token")
	if err := os.WriteFile(bad, []byte("wrong"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := mount(s.URL, "--remote-token-file", bad); r.Code != 5 || !strings.Contains(r.Stderr, "refused the token (401)") || strings.Contains(r.Stderr, "none was given") {
		t.Errorf("wrong token: want exit 5 saying the server refused it:\n%s", r)
	}
}

// TestMountWarnings: what a mount's user must know reaches the terminal,
// not only the log: a source that holds no object (a mistyped S3 prefix, an
// empty directory) is warned about, by the daemonizing parent and in the
// foreground (it used to mount an empty tree without a word), and
// --device cuda --allow-cpu-fallback on a machine without a GPU says in one
// line on stderr that it runs on the CPU, and why (it used to only log a
// WARN). A prefix that holds objects, with --device cpu, warns of nothing.
func TestMountWarnings(t *testing.T) {
	work := t.TempDir()
	src := filepath.Join(work, "src")
	writeJPEG(t, filepath.Join(src, "train", "cat", "a.jpg"), 64, 48, 1)
	srv, env := minioBucket(t, "warn", "imagenet/", src)
	model := testenv.Model(t, modelName)
	ort := testenv.ORTLib(t)

	daemon := func(source string, args ...string) (cliResult, string) {
		mnt := filepath.Join(t.TempDir(), "mnt")
		if err := os.Mkdir(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		logFile := filepath.Join(t.TempDir(), "featurefs.log")
		all := append([]string{"mount", "--model", modelName + "=" + model, "--cache-dir", filepath.Join(t.TempDir(), "cache"),
			"--ort-lib", ort, "--log-file", logFile, "--endpoint-url", srv.Endpoint, "--prefetch", "off"}, args...)
		r := runCLI(t, 3*time.Minute, env, append(all, source, mnt)...)
		if r.Code != 0 {
			t.Fatalf("featurefs mount %s: %s", source, r)
		}
		daemonOf(t, r, mnt, logFile).Unmount(t)
		return r, logFile
	}
	warnings := func(r cliResult) []string {
		var out []string
		for _, l := range lines(r.Stderr) {
			if strings.HasPrefix(l, "featurefs mount: warning: ") {
				out = append(out, l)
			}
		}
		return out
	}

	// A mistyped prefix, and an explicit GPU that is not there.
	r, logFile := daemon("s3://warn/imagnet", "--device", "cuda", "--allow-cpu-fallback")
	w := warnings(r)
	if len(w) != 2 || !strings.Contains(r.Stderr, "source s3://warn/imagnet holds no object") ||
		!strings.Contains(r.Stderr, "--device cuda: ") || !strings.Contains(r.Stderr, "running on the CPU") {
		t.Errorf("mount of an empty prefix with --device cuda --allow-cpu-fallback: want two warning lines, the empty source and the CPU:\n%s", r)
	}
	if l := logLines(t, logFile, "level=WARN", "holds no object"); len(l) != 1 {
		t.Errorf("log lines about the empty source: %q, want one WARN", l)
	}
	if l := logLines(t, logFile, "level=WARN", "GPU"); len(l) != 1 {
		t.Errorf("log lines about the GPU: %q, want one WARN", l)
	}

	// The right prefix, on the CPU: nothing to warn about.
	if r, _ := daemon("s3://warn/imagenet", "--device", "cpu"); len(warnings(r)) != 0 {
		t.Errorf("mount of a prefix with objects, --device cpu, warned:\n%s", r)
	}

	// An empty directory in the foreground: the line is on stderr.
	empty := filepath.Join(work, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	m := testMount(t, mountConfig{Source: empty})
	m.Unmount(t)
	if out := tail(m.Log, 1<<20); !strings.Contains(out, "featurefs mount: warning: source "+empty+" holds no object") {
		t.Errorf("foreground mount of an empty directory: no warning line:\n%s", out)
	}
}

// TestExtractClassTree: featurefs extract over a class tree mirrors it
// under -o (it used to refuse train/dog/img000.jpg after
// train/cat/img000.jpg, exiting 1); inputs that would write the same file
// are refused with exit 2 before anything is written; a bad image exits 1
// and a missing model 4.
func TestExtractClassTree(t *testing.T) {
	model := testenv.Model(t, modelName)
	work := t.TempDir()
	cat := filepath.Join(work, "train", "cat", "img000.jpg")
	dog := filepath.Join(work, "train", "dog", "img000.jpg")
	writeJPEG(t, cat, 64, 48, 1)
	writeJPEG(t, dog, 48, 64, 9)
	extract := func(out string, extra ...string) cliResult {
		args := append([]string{"extract", "--model", model, "--layer", "layer0", "--device", "cpu", "-o", out}, extra...)
		return runCLI(t, 3*time.Minute, nil, args...)
	}

	out := filepath.Join(work, "out")
	if r := extract(out, cat, dog); r.Code != 0 {
		t.Fatalf("extract of a class tree: %s", r)
	}
	a := readNPY(t, filepath.Join(out, "cat", "img000.npy"))
	b := readNPY(t, filepath.Join(out, "dog", "img000.npy"))
	if fmt.Sprint(a.Shape) != "[64 112 112]" || fmt.Sprint(b.Shape) != "[64 112 112]" {
		t.Errorf("shapes %v and %v, want [64 112 112]", a.Shape, b.Shape)
	}
	if bytes.Equal(a.Raw, b.Raw) {
		t.Errorf("cat/img000.npy and dog/img000.npy hold the same tensor")
	}
	rel := filepath.Join(work, "out-rel")
	if r := extract(rel, "--relative-to", work, cat); r.Code != 0 {
		t.Errorf("extract --relative-to: %s", r)
	} else if _, err := os.Stat(filepath.Join(rel, "train", "cat", "img000.npy")); err != nil {
		t.Errorf("extract --relative-to %s: %v", work, err)
	}

	dup := filepath.Join(work, "out-dup")
	r := extract(dup, cat, dog, cat)
	if r.Code != 2 || !strings.Contains(r.Stderr, cat+" is given twice") {
		t.Errorf("the same image twice: want exit 2 saying so:\n%s", r)
	}
	if _, err := os.Stat(dup); err == nil {
		t.Errorf("a refused extract created %s", dup)
	}

	// a.jpg.jpg would write a.jpg.npy, the name a.jpg takes next to a.png.
	clash := filepath.Join(work, "clash")
	for _, n := range []string{"a.jpg", "a.jpg.jpg"} {
		writeJPEG(t, filepath.Join(clash, n), 32, 32, 3)
	}
	if err := os.WriteFile(filepath.Join(clash, "a.png"), []byte("png"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = extract(filepath.Join(work, "out-clash"), filepath.Join(clash, "a.jpg"), filepath.Join(clash, "a.png"), filepath.Join(clash, "a.jpg.jpg"))
	if r.Code != 2 || !strings.Contains(r.Stderr, "would both write a.jpg.npy") {
		t.Errorf("a.jpg, a.png and a.jpg.jpg: want exit 2 naming the file both would write:\n%s", r)
	}

	bad := filepath.Join(work, "train", "cat", "bad.jpg")
	if err := os.WriteFile(bad, []byte("not an image"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = extract(filepath.Join(work, "out-bad"), cat, bad)
	if r.Code != 1 || !strings.Contains(r.Stderr, bad+": ") || strings.Count(r.Stderr, "bad.jpg") != 1 {
		t.Errorf("a bad image: want exit 1 and one line naming it once:\n%s", r)
	}
	if r := runCLI(t, time.Minute, nil, "extract", "--model", "/nonexistent/m.onnx", "--layer", "layer0", "-o", filepath.Join(work, "o4"), cat); r.Code != 4 {
		t.Errorf("a missing model: want exit 4:\n%s", r)
	}
}
