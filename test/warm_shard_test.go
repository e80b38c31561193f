package test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/test/testenv"
)

// shardSummary is a sharded warm's count line: extracted now, found in the
// store, left to the other shards.
var shardSummary = regexp.MustCompile(`(?m)^featurefs warm shard (\d+)/(\d+): (\d+) extracted, (\d+) found cached or in the feature store; (\d+) objects left to the other shards$`)

// TestWarmShardsFillOneStore is docs/FEATURE-STORE.md's "Many hosts":
// three `featurefs warm --shard k/3` processes, each with a cache of its
// own (three hosts), started at once against one MinIO feature store.
// Each extracts exactly the images whose key the shard function puts in
// its part (so the parts are disjoint), the extractions add up to the
// number of images (none computed twice) and the store then holds every
// feature (the union covers the layer). Progress lines name the shard. A
// rerun of one shard on a fresh cache extracts nothing, and a store-only
// mount with a cold cache reads the whole layer with zero extractions,
// byte-identical to the store's objects.
func TestWarmShardsFillOneStore(t *testing.T) {
	d := genDataset(t, "--classes", "3", "--train", "5", "--val", "2")
	srv, env := minioBucket(t, "data", "", d.Dir)
	srv.CreateBucket(t, "features")
	names := featureNames(d.keys(t))
	images := d.images("")
	model := testenv.Model(t, modelName)
	const n = 3
	parts := make([][]string, n) // the keys of each part, as the shard function splits them
	for _, o := range images {
		k := spec.ShardOf(o.Key, n)
		parts[k] = append(parts[k], o.Key)
	}
	sizes := make([]int, n)
	for k := range parts {
		sizes[k] = len(parts[k])
		if len(parts[k]) == 0 {
			t.Fatalf("part %d of %d holds none of the %d images: the test would prove nothing", k, n, len(images))
		}
	}
	t.Logf("%d images split %v", len(images), sizes)

	warm := func(shard string, cacheDir, store string) *exec.Cmd {
		cmd := exec.Command(featurefsBin(t), "warm", "--source", "s3://data", "--endpoint-url", srv.Endpoint,
			"--model", modelName+"="+model, "--layer", testLayer, "--cache-dir", cacheDir, "--device", "cpu",
			"--feature-store", store, "--shard", shard, "--progress-interval", "1s")
		cmd.Env = append(append(os.Environ(), "FEATUREFS_ORT_LIB="+testenv.ORTLib(t)), env...)
		return cmd
	}
	// check verifies one warm's output: exit 0, its part done, the counts.
	check := func(shard int, out string, wantExtracted, wantFound int) {
		t.Helper()
		label := fmt.Sprintf("shard %d/%d", shard, n)
		if want := fmt.Sprintf("featurefs warm %s: %d of %d done", label, len(parts[shard]), len(parts[shard])); !strings.Contains(out, want) {
			t.Errorf("warm %s: want %q in:\n%s", label, want, out)
		}
		m := shardSummary.FindStringSubmatch(out)
		if m == nil {
			t.Errorf("warm %s: no count line in:\n%s", label, out)
			return
		}
		got := []string{m[1], m[2], m[3], m[4], m[5]}
		want := []string{strconv.Itoa(shard), strconv.Itoa(n), strconv.Itoa(wantExtracted), strconv.Itoa(wantFound), strconv.Itoa(len(images) - len(parts[shard]))}
		if !slices.Equal(got, want) {
			t.Errorf("warm %s: shard, N, extracted, found, others' = %v, want %v", label, got, want)
		}
		if !regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d warm ` + regexp.QuoteMeta(label) + `: \d+/\d+\+? `).MatchString(out) {
			t.Errorf("warm %s: no progress line naming the shard in:\n%s", label, out)
		}
	}

	// Three hosts at once.
	cmds := make([]*exec.Cmd, n)
	outs := make([]bytes.Buffer, n)
	for k := range n {
		cmds[k] = warm(fmt.Sprintf("%d/%d", k, n), filepath.Join(t.TempDir(), "cache"), "s3://features/sharded")
		cmds[k].Stdout, cmds[k].Stderr = &outs[k], &outs[k]
		if err := cmds[k].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for k := range n {
		if err := cmds[k].Wait(); err != nil {
			t.Errorf("warm --shard %d/%d: %v\n%s", k, n, err, outs[k].String())
		}
	}
	for k := range n {
		t.Logf("warm --shard %d/%d:\n%s", k, n, outs[k].String())
		check(k, outs[k].String(), len(parts[k]), 0)
	}

	// The store holds every feature, once.
	digest12 := layerDigest12(t, model, testLayer)
	layerDir := func(store string) string {
		return store + "/" + modelName + "-" + digest12 + "/" + testLayer + "/"
	}
	// holds checks that the store under prefix store holds the features
	// of keys, and nothing else.
	holds := func(store string, keys []string) {
		t.Helper()
		dir := layerDir(store)
		var stored, want []string
		pg := s3.NewListObjectsV2Paginator(srv.Client(), &s3.ListObjectsV2Input{Bucket: aws.String("features"), Prefix: aws.String(dir)})
		for pg.HasMorePages() {
			page, err := pg.NextPage(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range page.Contents {
				stored = append(stored, strings.TrimPrefix(aws.ToString(o.Key), dir))
			}
		}
		for _, k := range keys {
			want = append(want, names[k])
		}
		slices.Sort(want)
		slices.Sort(stored)
		if !slices.Equal(stored, want) {
			t.Errorf("feature store %s holds %d features %v, want %d: %v", store, len(stored), stored, len(want), want)
		}
	}
	var all []string
	for _, o := range images {
		all = append(all, o.Key)
	}
	holds("sharded", all)

	// A rerun of one part (a pod restarted on another node) finds it all.
	out, err := warm(fmt.Sprintf("1/%d", n), filepath.Join(t.TempDir(), "cache"), "s3://features/sharded").CombinedOutput()
	if err != nil {
		t.Fatalf("rerun of shard 1/%d: %v\n%s", n, err, out)
	}
	check(1, string(out), 0, len(parts[1]))

	// The part's objects are those the shard function names: shard 2 alone
	// into an empty store writes exactly its part.
	out, err = warm(fmt.Sprintf("2/%d", n), filepath.Join(t.TempDir(), "cache"), "s3://features/only2").CombinedOutput()
	if err != nil {
		t.Fatalf("shard 2/%d into an empty store: %v\n%s", n, err, out)
	}
	check(2, string(out), len(parts[2]), 0)
	holds("only2", parts[2])

	// Any mount with the store: every feature, no extraction.
	m := testMount(t, mountConfig{Source: "s3://data", Env: env, Args: []string{"--endpoint-url", srv.Endpoint,
		"--feature-store", "s3://features/sharded", "--feature-store-only", "--prefetch", "off"}})
	got := make(map[string][]byte, len(images))
	for _, o := range images {
		b, err := os.ReadFile(filepath.Join(m.Layer(testLayer), filepath.FromSlash(names[o.Key])))
		if err != nil {
			t.Fatalf("read %s: %v", names[o.Key], err)
		}
		got[o.Key] = b
	}
	if x := extractionCount(t, mountStats(t, m)); x != 0 {
		t.Errorf("store-only mount after the sharded warm: %d extractions, want 0", x)
	}
	for _, o := range images {
		b, _ := storeFeature(t, srv, "features", layerDir("sharded")+names[o.Key])
		if !bytes.Equal(b, got[o.Key]) {
			t.Errorf("%s: the mount's file differs from the store's object", names[o.Key])
		}
	}
}
