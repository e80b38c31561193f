package test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	_ "image/jpeg"
	_ "image/png"
	"math"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/featurefs/featurefs/extractor/augment"
	"github.com/featurefs/featurefs/test/testenv"
)

// Issue 41's fidelity target, through `featurefs extract --augment`: for
// every augmented view, the feature equals torchvision's forward of
// resized_crop(img, top, left, height, width, size) (+ hflip where flip)
// with the parameters the view publishes, max relative L2 <= 1e-3, over
// 100 images x 4 views.

// augView is a line of an augment.jsonl: a file's name and its view's
// parameters.
type augView struct {
	File string `json:"file"`
	augment.Params
}

// runExtract runs featurefs extract with args and fails the test on a
// non-zero exit.
func runExtract(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(featurefsBin(t), append([]string{"extract"}, args...)...)
	cmd.Env = append(os.Environ(), "FEATUREFS_ORT_LIB="+testenv.ORTLib(t))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("featurefs extract %s: %v\n%s", strings.Join(args, " "), err, b)
	}
}

// readViews reads the augment.jsonl files under root: each view file's
// path relative to root and its parameters; and checks that each file's
// extended attribute says the same.
func readViews(t *testing.T, root string) map[string]augView {
	t.Helper()
	views := map[string]augView{}
	err := filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || e.Name() != "augment.jsonl" {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var v augView
			if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
				return fmt.Errorf("%s: %q: %v", p, sc.Text(), err)
			}
			file := filepath.Join(filepath.Dir(p), v.File)
			rel, _ := filepath.Rel(root, file)
			views[filepath.ToSlash(rel)] = v
			buf := make([]byte, 4096)
			n, err := getxattr(file, "user.featurefs.augment", buf)
			if err != nil {
				t.Errorf("%s: extended attribute: %v", rel, err)
				continue
			}
			var x augView
			if err := json.Unmarshal(buf[:n], &x); err != nil {
				t.Errorf("%s: extended attribute %q: %v", rel, buf[:n], err)
			}
			x.File = v.File
			if x != v {
				t.Errorf("%s: extended attribute %+v, augment.jsonl %+v", rel, x, v)
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return views
}

// torchViews runs scripts/ref_features.py --views on views (JSON lines:
// "image" and the view's parameters) at ResNet-50 layer12 (layer3.3) and
// returns the directory of its outputs, <i>.npy for line i.
func torchViews(t *testing.T, views []byte) string {
	t.Helper()
	viewsFile := filepath.Join(t.TempDir(), "views.jsonl")
	if err := os.WriteFile(viewsFile, views, 0o644); err != nil {
		t.Fatal(err)
	}
	refDir := t.TempDir()
	ref := exec.Command(testenv.RequireTorch(t), filepath.Join(testenv.RepoRoot(t), "scripts", "ref_features.py"),
		"--model", modelName, "--seed", "0", "--module", "layer3.3", "--threads", "2", "--views", viewsFile, "--out", refDir)
	if b, err := ref.CombinedOutput(); err != nil {
		t.Fatalf("ref_features.py --views: %v\n%s", err, b)
	}
	return refDir
}

// getxattr is unix.Getxattr retried while it is interrupted, as Python's
// os.getxattr and Go's os package retry: the kernel answers EINTR for a
// FUSE request a signal interrupted (the Go runtime's own, here).
func getxattr(path, name string, buf []byte) (int, error) {
	return retryEINTR(func() (int, error) { return unix.Getxattr(path, name, buf) })
}

// retryEINTR calls f until it is not interrupted, as Go's os package and
// Python (PEP 475) retry open: a Go runtime signal that lands while the
// kernel waits on the mount makes a raw unix.Open* answer EINTR.
func retryEINTR(f func() (int, error)) (int, error) {
	for {
		n, err := f()
		if err != unix.EINTR {
			return n, err
		}
	}
}

// relL2 is ||a-b|| / ||b||.
func relL2(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d, n float64
	for i := range a {
		x := float64(a[i]) - float64(b[i])
		d += x * x
		n += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(d / n)
}

// TestExtractAugmentedViewsMatchTorchvision extracts 4 augmented views of
// 100 generated images at ResNet-50 layer12 and compares every one with
// torchvision's forward of the view its parameters describe
// (scripts/ref_features.py --views); then checks that the views of an
// image differ, that a rerun writes the same bytes and parameters, and
// that another seed draws other views.
func TestExtractAugmentedViewsMatchTorchvision(t *testing.T) {
	const views = 4
	d := genDataset(t, "--classes", "2", "--train", "50", "--val", "0")
	train := filepath.Join(d.Dir, "train")
	src := map[string]string{} // class/name.npy -> the image
	for _, o := range d.images("train/") {
		rel := strings.TrimPrefix(o.Key, "train/")
		src[strings.TrimSuffix(rel, path.Ext(rel))+".npy"] = filepath.Join(d.Dir, filepath.FromSlash(o.Key))
	}
	if len(src) < 100 {
		t.Fatalf("gen_dataset made %d images, want 100", len(src))
	}
	model := testenv.Model(t, modelName)
	out := t.TempDir()
	runExtract(t, "--model", model, "--layer", testLayer, "--augment", fmt.Sprint(views), "--augment-seed", "3", train, "-o", out)
	got := readViews(t, out)
	if len(got) != views*len(src) {
		t.Fatalf("%d views listed in augment.jsonl files, want %d", len(got), views*len(src))
	}

	// torchvision's features of the views, in one run.
	var lines bytes.Buffer
	var order []string
	for rel, v := range got {
		k, name, _ := strings.Cut(rel, "/")
		if k != fmt.Sprint(v.View) || v.Seed != 3 || v.Size != 224 {
			t.Errorf("%s: view %d seed %d size %d, want view %s seed 3 size 224", rel, v.View, v.Seed, v.Size, k)
		}
		img, ok := src[name]
		if !ok {
			t.Fatalf("view %s of no image", rel)
		}
		b, _ := json.Marshal(map[string]any{"image": img, "top": v.Top, "left": v.Left, "height": v.Height, "width": v.Width, "flip": v.Flip, "size": v.Size})
		lines.Write(append(b, '\n'))
		order = append(order, rel)
	}
	refDir := torchViews(t, lines.Bytes())
	var worst, sum float64
	flips := 0
	for i, rel := range order {
		a := readNPY(t, filepath.Join(out, filepath.FromSlash(rel)))
		b := readNPY(t, filepath.Join(refDir, fmt.Sprintf("%d.npy", i)))
		r := relL2(a.Data, b.Data)
		if !(r <= 1e-3) {
			t.Errorf("%s (%+v): relative L2 %.3g against torchvision, want <= 1e-3", rel, got[rel], r)
		}
		worst, sum = max(worst, r), sum+r
		if got[rel].Flip {
			flips++
		}
	}
	t.Logf("%d views of %d images: relative L2 against torchvision mean %.2g, worst %.2g; %d flipped", len(order), len(src), sum/float64(len(order)), worst, flips)
	if flips == 0 || flips == len(order) {
		t.Errorf("%d of %d views flipped", flips, len(order))
	}

	// The views of an image are distinct, but for RandomResizedCrop's
	// fallback: when 10 draws of an image fail to fit (gen_dataset makes
	// aspect ratios up to 10:1, far outside 3/4-4/3), the crop is the
	// centre one, the same for every view; whether a draw fits depends on
	// the file's mtime (in its identity), so such an image has one box in
	// some runs. An image of a ratio within 3/4-4/3 fits nearly every draw.
	oneBox := 0
	for name := range src {
		seen := map[[4]int]bool{}
		for k := range views {
			v := got[fmt.Sprintf("%d/%s", k, name)]
			seen[[4]int{v.Top, v.Left, v.Height, v.Width}] = true
		}
		if len(seen) >= 2 {
			continue
		}
		oneBox++
		f, err := os.Open(src[name])
		if err != nil {
			t.Fatal(err)
		}
		c, _, err := image.DecodeConfig(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", src[name], err)
		}
		if r := float64(c.Width) / float64(c.Height); r >= 3.0/4 && r <= 4.0/3 {
			t.Errorf("%s (%dx%d): its %d views have one crop box", name, c.Width, c.Height, views)
		}
	}
	if oneBox > len(src)/10 {
		t.Errorf("%d of %d images have one crop box in their %d views", oneBox, len(src), views)
	}

	// A rerun (one class, the same paths under -o) writes the same views;
	// another seed draws others.
	again, other := t.TempDir(), t.TempDir()
	runExtract(t, "--model", model, "--layer", testLayer, "--augment", "1", "--augment-seed", "3", "--relative-to", train, filepath.Join(train, "cat"), "-o", again)
	runExtract(t, "--model", model, "--layer", testLayer, "--augment", "1", "--augment-seed", "4", "--relative-to", train, filepath.Join(train, "cat"), "-o", other)
	rerun, seed4 := readViews(t, again), readViews(t, other)
	if len(rerun) == 0 || len(rerun) != len(seed4) {
		t.Fatalf("reruns: %d and %d views", len(rerun), len(seed4))
	}
	differ := 0
	for rel, v := range rerun {
		if v != got[rel] {
			t.Errorf("%s: rerun drew %+v, first run %+v", rel, v, got[rel])
		}
		b1, err1 := os.ReadFile(filepath.Join(out, filepath.FromSlash(rel)))
		b2, err2 := os.ReadFile(filepath.Join(again, filepath.FromSlash(rel)))
		if err1 != nil || err2 != nil || !bytes.Equal(b1, b2) {
			t.Errorf("%s: rerun's bytes differ (%v, %v)", rel, err1, err2)
		}
		w := seed4[rel]
		if w.Top != v.Top || w.Left != v.Left || w.Height != v.Height || w.Width != v.Width {
			differ++
		}
	}
	if differ < len(rerun)*3/4 {
		t.Errorf("--augment-seed 4 drew another crop box than seed 3 for %d of %d images", differ, len(rerun))
	}
}

// TestMountAugmentedViews mounts a local directory of 25 generated images
// with --augment 4 and reads every view at ResNet-50 layer12 through the
// kernel: each view directory lists the plain layer's names and its
// augment.jsonl, whose lines are extract's parameters; each view
// file's bytes and user.featurefs.augment equal what featurefs extract
// --augment writes for the same directory and seed (the same identity:
// key and size-mtime ETag), and its feature equals torchvision's forward
// of the view its parameters describe.
func TestMountAugmentedViews(t *testing.T) {
	const views = 4
	d := genDataset(t, "--classes", "1", "--train", "25", "--val", "0")
	m := testMount(t, mountConfig{Source: d.Dir, Args: []string{"--augment", fmt.Sprint(views), "--augment-seed", "3", "--prefetch", "off"}})
	plainDir := m.Layer(testLayer)
	augDir := filepath.Join(filepath.Dir(plainDir), testLayer+"-aug")
	out := t.TempDir()
	runExtract(t, "--model", testenv.Model(t, modelName), "--layer", testLayer, "--augment", fmt.Sprint(views), "--augment-seed", "3",
		"--relative-to", d.Dir, filepath.Join(d.Dir, "train"), "-o", out)
	want := readViews(t, out)
	imgs := d.images("train/")
	if len(want) != views*len(imgs) {
		t.Fatalf("extract wrote %d views of %d images", len(want), len(imgs))
	}
	var lines bytes.Buffer
	var order []string
	for k := range views {
		for _, o := range imgs {
			rel := strings.TrimSuffix(o.Key, path.Ext(o.Key)) + ".npy"
			name := fmt.Sprintf("%d/%s", k, rel)
			p := filepath.Join(augDir, filepath.FromSlash(name))
			got, err := os.ReadFile(p)
			if err != nil {
				t.Fatalf("read %s: %v", name, err)
			}
			ref, err := os.ReadFile(filepath.Join(out, filepath.FromSlash(name)))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, ref) {
				t.Errorf("%s: the mount's view differs from extract --augment's", name)
			}
			buf := make([]byte, 4096)
			n, err := getxattr(p, "user.featurefs.augment", buf)
			if err != nil {
				t.Fatalf("getxattr %s: %v", name, err)
			}
			var v augView
			if err := json.Unmarshal(buf[:n], &v); err != nil {
				t.Fatalf("%s: %q: %v", name, buf[:n], err)
			}
			v.File = path.Base(rel)
			if v != want[name] {
				t.Errorf("%s: the mount's parameters %+v, extract's %+v", name, v, want[name])
			}
			b, _ := json.Marshal(map[string]any{"image": filepath.Join(d.Dir, filepath.FromSlash(o.Key)), "top": v.Top, "left": v.Left, "height": v.Height, "width": v.Width, "flip": v.Flip, "size": v.Size})
			lines.Write(append(b, '\n'))
			order = append(order, p)
		}
	}
	// Each view directory's augment.jsonl says what the files' attributes
	// say (padded lines: a JSON decoder skips the spaces).
	for k := range views {
		rel := fmt.Sprintf("%d/train/%s", k, imgs[0].Class)
		b, err := os.ReadFile(filepath.Join(augDir, filepath.FromSlash(rel), "augment.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		n := 0
		for dec.More() {
			var v augView
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("%s/augment.jsonl: %v", rel, err)
			}
			if w := want[rel+"/"+v.File]; v != w {
				t.Errorf("%s/augment.jsonl: %+v, extract's %+v", rel, v, w)
			}
			n++
		}
		if n != len(imgs) {
			t.Errorf("%s/augment.jsonl: %d lines, want %d", rel, n, len(imgs))
		}
	}
	plainNames, err := readDirNames(filepath.Join(plainDir, "train", imgs[0].Class))
	if err != nil {
		t.Fatal(err)
	}
	viewNames, err := readDirNames(filepath.Join(augDir, "2", "train", imgs[0].Class))
	if err != nil || !slices.Equal(append([]string{"augment.jsonl"}, plainNames...), viewNames) {
		t.Errorf("view 2 lists %v (%v), the plain layer %v", viewNames, err, plainNames)
	}
	refDir := torchViews(t, lines.Bytes())
	var worst float64
	for i, p := range order {
		r := relL2(readNPY(t, p).Data, readNPY(t, filepath.Join(refDir, fmt.Sprintf("%d.npy", i))).Data)
		if !(r <= 1e-3) {
			t.Errorf("%s: relative L2 %.3g against torchvision, want <= 1e-3", p, r)
		}
		worst = max(worst, r)
	}
	t.Logf("%d views through the mount: equal to extract --augment's, worst relative L2 against torchvision %.2g", len(order), worst)
}

// TestRemoteAugmentedViews: `featurefs warm` of a view tree computes its
// views once; `featurefs serve` over a local directory and
// `featurefs mount --remote --augment 2 --feature-augment 1`: the view
// files, their extended attributes and augment.jsonl equal those of a
// mount of the directory itself (the server draws views from the same key
// and ETag), and so do the feature-space views, computed on the mount
// from the plain features the server sends.
func TestRemoteAugmentedViews(t *testing.T) {
	d := genDataset(t, "--classes", "1", "--train", "4", "--val", "0")
	args := []string{"--augment", "2", "--augment-seed", "5", "--feature-augment", "1", "--prefetch", "off"}
	local := testMount(t, mountConfig{Source: d.Dir, Args: args})
	// featurefs warm of a view tree computes its views: reading them
	// afterwards extracts nothing more.
	extractions := func() float64 { return fsExtractions(t, local) }
	warmDir := filepath.Join(filepath.Dir(local.Layer(testLayer)), testLayer+"-aug", "1", "train")
	if b, err := exec.Command(featurefsBin(t), "warm", warmDir).CombinedOutput(); err != nil {
		t.Fatalf("featurefs warm %s: %v\n%s", warmDir, err, b)
	}
	if n := extractions(); n != 4 {
		t.Errorf("warm of view 1's tree: %v extractions, want 4", n)
	}
	srv := startServe(t, d.Dir, nil)
	rem := testMount(t, mountConfig{Args: srv.remoteArgs(args...), NoModel: true})
	class := d.images("train/")[0].Class
	for _, dir := range []string{testLayer + "-aug/0", testLayer + "-aug/1", testLayer + "-faug/0"} {
		rel := filepath.Join(dir, "train", class)
		lp := filepath.Join(filepath.Dir(local.Layer(testLayer)), rel)
		rp := filepath.Join(filepath.Dir(rem.Layer(testLayer)), rel)
		names, err := readDirNames(lp)
		if err != nil {
			t.Fatal(err)
		}
		rnames, err := readDirNames(rp)
		if err != nil || !slices.Equal(names, rnames) {
			t.Fatalf("%s: the remote mount lists %v (%v), the local one %v", rel, rnames, err, names)
		}
		for _, n := range names {
			a, err1 := os.ReadFile(filepath.Join(lp, n))
			b, err2 := os.ReadFile(filepath.Join(rp, n))
			if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
				t.Errorf("%s/%s: the remote mount's bytes differ from the local one's (%v, %v)", rel, n, err1, err2)
			}
			if n == "augment.jsonl" {
				continue
			}
			x1, x2 := make([]byte, 1024), make([]byte, 1024)
			n1, err1 := getxattr(filepath.Join(lp, n), "user.featurefs.augment", x1)
			n2, err2 := getxattr(filepath.Join(rp, n), "user.featurefs.augment", x2)
			if err1 != nil || err2 != nil || !bytes.Equal(x1[:n1], x2[:n2]) {
				t.Errorf("%s/%s: attributes %q (%v) remote, %q (%v) local", rel, n, x2[:max(n2, 0)], err2, x1[:max(n1, 0)], err1)
			}
		}
	}
	// The local mount computed view 0 (4 images) and the plain features
	// the feature-space view reads (4), nothing more for view 1.
	if n := extractions(); n != 12 {
		t.Errorf("%v extractions by the local mount, want 12: 4 each for warm's view 1, view 0 and the plain features", n)
	}
}
