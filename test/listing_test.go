package test

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/test/testenv"
)

// TestListStatFind mounts a generated bucket from MinIO and checks the tree
// with ls, stat and find: every image object appears under its .npy name and
// nothing else does, directories mirror prefixes, sizes equal the bytes read,
// and the layers file describes ResNet-50's 20 layers.
func TestListStatFind(t *testing.T) {
	d := genDataset(t, "--bad", "--classes", "3", "--train", "2", "--val", "1")
	srv, env := minioBucket(t, "imgs", "", d.Dir)
	m := testMount(t, mountConfig{Source: "s3://imgs", Env: env, Args: []string{"--endpoint-url", srv.Endpoint}})

	// The root and the model directory.
	mustList(t, m.Path("features"), []string{modelName})
	names := listNames(t, m.Path("features", modelName))
	for i := 0; i < 20; i++ {
		if !contains(names, fmt.Sprintf("layer%d", i)) {
			t.Errorf("features/%s lacks layer%d: %v", modelName, i, names)
		}
	}
	if contains(names, "layer20") || !contains(names, "layers") {
		t.Errorf("features/%s = %v, want layer0..layer19 and layers", modelName, names)
	}

	// find over the layer directory lists exactly the expected files.
	want := map[string]bool{}
	for _, rel := range featureNames(d.keys(t)) {
		want[rel] = true
	}
	layerDir := m.Layer(testLayer)
	out, err := exec.Command("find", layerDir, "-type", "f").CombinedOutput()
	if err != nil {
		t.Fatalf("find: %v\n%s", err, out)
	}
	got := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		rel, err := filepath.Rel(layerDir, line)
		if err != nil {
			t.Fatal(err)
		}
		got[rel] = true
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("find %s:\n got %v\nwant %v", layerDir, sortedKeys(got), sortedKeys(want))
	}
	for _, dup := range []string{"train/cat/dup.jpg.npy", "train/cat/dup.png.npy", "train/cat/img0000.npy"} {
		if !got[dup] {
			t.Errorf("find lacks %s", dup)
		}
	}
	for rel := range got {
		if strings.HasSuffix(rel, ".txt.npy") || strings.HasSuffix(rel, ".json.npy") || strings.Contains(rel, "manifest") {
			t.Errorf("non-image object listed: %s", rel)
		}
	}
	dirsOut, err := exec.Command("find", layerDir, "-mindepth", "1", "-type", "d").CombinedOutput()
	if err != nil {
		t.Fatalf("find -type d: %v\n%s", err, dirsOut)
	}
	var dirs []string
	for _, line := range strings.Fields(string(dirsOut)) {
		rel, _ := filepath.Rel(layerDir, line)
		dirs = append(dirs, rel)
	}
	sort.Strings(dirs)
	wantDirs := []string{"broken", "train", "val"}
	for _, c := range d.Classes {
		wantDirs = append(wantDirs, "train/"+c, "val/"+c)
	}
	sort.Strings(wantDirs)
	if !reflect.DeepEqual(dirs, wantDirs) {
		t.Errorf("directories under %s = %v, want %v", testLayer, dirs, wantDirs)
	}

	// ls -l agrees with find and shows read-only files and directories.
	lsOut, err := exec.Command("ls", "-ln", filepath.Join(layerDir, "train", "cat")).CombinedOutput()
	if err != nil {
		t.Fatalf("ls -ln: %v\n%s", err, lsOut)
	}
	lsFiles := 0
	for _, line := range strings.Split(string(lsOut), "\n") {
		if strings.HasPrefix(line, "-") {
			lsFiles++
			if strings.ContainsAny(line[:10], "w") {
				t.Errorf("ls -l shows a writable file: %s", line)
			}
		}
	}
	if wantN := countPrefix(want, "train/cat/"); lsFiles != wantN {
		t.Errorf("ls -l train/cat shows %d files, want %d:\n%s", lsFiles, wantN, lsOut)
	}

	// stat never computes: every size is the layer's .npy size, and a
	// read returns exactly that many bytes of a valid .npy of that shape.
	wantSize := api.NPYSize(testLayerShape, extractor.Float32)
	statOut, err := exec.Command("stat", "-c", "%s %F %n", filepath.Join(layerDir, "train", "cat", "img0000.npy")).CombinedOutput()
	if err != nil {
		t.Fatalf("stat: %v\n%s", err, statOut)
	}
	if f := strings.Fields(string(statOut)); len(f) < 2 || f[0] != strconv.FormatInt(wantSize, 10) || !strings.HasPrefix(f[1], "regular") {
		t.Errorf("stat(1) = %q, want size %d, regular file", statOut, wantSize)
	}
	bad := map[string]bool{}
	for _, o := range d.bad() {
		bad[featureNames([]string{o.Key})[o.Key]] = true
	}
	err = filepath.WalkDir(layerDir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		if e.IsDir() {
			if fi.Mode().Perm()&0o222 != 0 {
				t.Errorf("%s: writable directory mode %v", p, fi.Mode())
			}
			return nil
		}
		if fi.Size() != wantSize {
			t.Errorf("%s: stat size %d, want %d", p, fi.Size(), wantSize)
		}
		if fi.Mode().Perm()&0o222 != 0 || !fi.Mode().IsRegular() {
			t.Errorf("%s: mode %v, want a read-only regular file", p, fi.Mode())
		}
		rel, _ := filepath.Rel(layerDir, p)
		if bad[rel] {
			return nil // bad_object_test.go covers these.
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("read %s: %v", p, err)
			return nil
		}
		if int64(len(b)) != fi.Size() {
			t.Errorf("%s: read %d bytes, stat says %d", p, len(b), fi.Size())
		}
		f, err := parseNPY(b)
		if err != nil {
			t.Errorf("%s: %v", p, err)
		} else if !reflect.DeepEqual(f.Shape, testLayerShape) || f.DType != extractor.Float32 {
			t.Errorf("%s: shape %v dtype %s, want %v float32", p, f.Shape, f.DType, testLayerShape)
		}
		// stat after the read still gives the same size.
		if fi2, err := os.Stat(p); err != nil || fi2.Size() != int64(len(b)) {
			t.Errorf("%s: stat after read = %v, %v", p, fi2, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// A name that is not there is ENOENT, also for non-image objects.
	for _, p := range []string{
		filepath.Join(layerDir, "train", "cat", "README.npy"),
		filepath.Join(layerDir, "train", "cat", "README.txt"),
		filepath.Join(layerDir, "train", "cat", "img0000.jpg"),
		filepath.Join(layerDir, "nope"),
		m.Path("features", modelName, "layer99"),
		m.Path("features", "vgg16"),
	} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("stat %s = %v, want ENOENT", p, err)
		}
	}

	// The layers file: one row per layer, layer12 = 1024x14x14, sizes agree.
	lb, err := os.ReadFile(m.Path("features", modelName, "layers"))
	if err != nil {
		t.Fatalf("read layers: %v", err)
	}
	checkLayersTable(t, string(lb))
	if fi, err := os.Stat(m.Path("features", modelName, "layers")); err != nil || fi.Size() != int64(len(lb)) {
		t.Errorf("layers: stat %v, %v; read %d bytes", fi, err, len(lb))
	}
	// featurefs layers MODEL prints the same table.
	layersCmd := exec.Command(featurefsBin(t), "layers", testenv.Model(t, modelName))
	layersCmd.Env = append(os.Environ(), "FEATUREFS_ORT_LIB="+testenv.ORTLib(t))
	cliOut, err := layersCmd.Output()
	if err != nil {
		t.Errorf("featurefs layers: %v", err)
	} else if a, b := tableRows(string(cliOut)), tableRows(string(lb)); a != b {
		// The "# model NAME" comment names the file on the command line and
		// the model in the mount; the rows must be the same.
		t.Errorf("featurefs layers differs from the mount's layers file:\n%s\n---\n%s", cliOut, lb)
	}

	// The stats file is JSON.
	mountStats(t, m)
}

// checkLayersTable checks ResNet-50's table: rows for layer0..layer19 (by
// index or name), layer12 with 1024x14x14 and 802816 bytes per sample.
func checkLayersTable(t *testing.T, table string) {
	t.Helper()
	rows := 0
	var row12 string
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		first := strings.TrimPrefix(f[0], "layer")
		if n, err := strconv.Atoi(first); err == nil && n >= 0 && n < 20 {
			rows++
			if n == 12 {
				row12 = line
			}
		}
	}
	if rows != 20 {
		t.Errorf("layers table has %d rows for layer0..19, want 20:\n%s", rows, table)
	}
	shape := regexp.MustCompile(`1024\s*[x×,]\s*14\s*[x×,]\s*14`)
	if !shape.MatchString(row12) || !strings.Contains(row12, "802816") {
		t.Errorf("layer12 row %q: want shape 1024x14x14 and 802816 bytes", row12)
	}
}

// tableRows drops a table's comment lines.
func tableRows(table string) string {
	var rows []string
	for _, line := range strings.Split(strings.TrimSpace(table), "\n") {
		if !strings.HasPrefix(line, "#") {
			rows = append(rows, strings.TrimRight(line, " "))
		}
	}
	return strings.Join(rows, "\n")
}

func mustList(t *testing.T, dir string, want []string) {
	t.Helper()
	if got := listNames(t, dir); !reflect.DeepEqual(got, want) {
		t.Errorf("ls %s = %v, want %v", dir, got, want)
	}
}

func listNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("ls %s: %v", dir, err)
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	sort.Strings(names)
	return names
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func countPrefix(m map[string]bool, prefix string) int {
	n := 0
	for k := range m {
		if strings.HasPrefix(k, prefix) && !strings.Contains(k[len(prefix):], "/") {
			n++
		}
	}
	return n
}
