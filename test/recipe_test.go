package test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// readmeSection returns README.md's text from the heading line title (such
// as "### Name") to the next heading of the same or a higher level outside
// fenced code.
func readmeSection(t *testing.T, title string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n"+title+"\n")
	if !ok {
		t.Fatalf("README.md has no %q", title)
	}
	level := strings.IndexByte(title, ' ')
	var out strings.Builder
	inFence := false
	for _, line := range strings.SplitAfter(rest, "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if h := strings.IndexByte(line, ' '); !inFence && h > 0 && h <= level && strings.Trim(line[:h], "#") == "" {
			break
		}
		out.WriteString(line)
	}
	return out.String()
}

// fenced returns the first fenced code block of lang in text.
func fenced(t *testing.T, text, lang string) string {
	t.Helper()
	_, rest, ok := strings.Cut(text, "```"+lang+"\n")
	code, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatalf("no ```%s block in %q", lang, text[:min(len(text), 200)])
	}
	return code
}

var recipeEpoch = regexp.MustCompile(`(?m)^epoch (\d+): view (\d+), ([0-9.]+) s$`)

// TestReadmeAugmentRecipe runs README's "Training with augmented views"
// recipe as printed there (its mount flags, its Python loop, the mount
// point replaced) over a kernel mount of 12 generated images with
// ResNet-50: the loop trains its 8 epochs, epoch e on view (e-1) mod 4,
// and the mount computed each image's 4 views once (48 features in the
// cache; the model ran on 48 to 95 images, so epochs 5-8 computed
// nothing: with 12 images a recomputed epoch would make it 96 or more),
// with no view of val/ (what README says `--prefetch dir` is for: with
// the default tree walk the cache would hold 64).
func TestReadmeAugmentRecipe(t *testing.T) {
	const views, train, val = 4, 12, 4
	sec := readmeSection(t, "### Training with augmented views")
	mountCmd := strings.TrimSpace(fenced(t, sec, "sh"))
	if !strings.HasPrefix(mountCmd, "featurefs mount ") || strings.Contains(mountCmd, "\n") {
		t.Fatalf("README's recipe mount command: %q", mountCmd)
	}
	// Its flags between "mount" and --model (the test mount adds the model).
	flags := strings.Fields(strings.TrimPrefix(mountCmd, "featurefs mount "))
	var args []string
	for i := 0; i < len(flags) && flags[i] != "--model"; i++ {
		args = append(args, flags[i])
	}
	if strings.Join(args, " ") != "--augment 4 --prefetch dir" {
		t.Fatalf("README's recipe mounts with %q: this test checks --augment 4 --prefetch dir", args)
	}
	code := fenced(t, sec, "python")
	if !strings.Contains(code, "K, epochs = 4, 8") || !strings.Contains(code, `"/mnt/features/features/resnet50/layer12-aug"`) {
		t.Fatalf("README's recipe loop changed (K, epochs = 4, 8 over /mnt/features's resnet50 layer12-aug): update this test\n%s", code)
	}

	d := genDataset(t, "--classes", "2", "--train", strconv.Itoa(train/2), "--val", strconv.Itoa(val/2), "--min-side", "64", "--max-side", "256")
	m := testMount(t, mountConfig{Source: d.Dir, Args: args})
	code = strings.ReplaceAll(code, "/mnt/features/", m.Dir+"/")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, testenv.RequireTorch(t), "-c", code).CombinedOutput()
	if err != nil {
		t.Fatalf("README's recipe: %v\n%s", err, out)
	}
	got := recipeEpoch.FindAllStringSubmatch(string(out), -1)
	if len(got) != 8 {
		t.Fatalf("README's recipe printed %d epoch lines, want 8:\n%s", len(got), out)
	}
	for i, g := range got {
		if g[1] != strconv.Itoa(i+1) || g[2] != strconv.Itoa(i%views) {
			t.Errorf("line %d: epoch %s view %s, want epoch %d view %d", i+1, g[1], g[2], i+1, i%views)
		}
	}

	waitCacheWrites(t, m)
	st := mountStats(t, m)
	num := func(group, name string) float64 {
		g, _ := st[group].(map[string]any)
		v, ok := g[name].(float64)
		if !ok {
			t.Fatalf("stats: no %s.%s", group, name)
		}
		return v
	}
	if n := num("cache", "entries"); n != views*train {
		t.Errorf("the cache holds %v features after the recipe, want %d (%d views of %d train images)", n, views*train, views, train)
	}
	if n := num("extraction", "batched_items"); n < views*train || n >= 2*views*train {
		t.Errorf("the model ran on %v images, want %d to %d: each view computed once", n, views*train, 2*views*train-1)
	}
	t.Logf("README's recipe over %d images:\n%s", train, out)
}
