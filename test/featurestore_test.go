package test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/featurefs/featurefs/cache/codec"
	"github.com/featurefs/featurefs/fs/featurestore"
	"github.com/featurefs/featurefs/test/testenv"
)

// readLayer reads every feature file of names under a mount's layer and
// returns the bytes by object key.
func readLayer(t *testing.T, m *mounted, names map[string]string) map[string][]byte {
	t.Helper()
	return readLayerFiles(t, m, testLayer, names)
}

// waitStoreField polls the stats until the feature store's field reaches
// want.
func waitStoreField(t *testing.T, m *mounted, field string, want int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got := statsField(t, mountStats(t, m), "feature_store."+field)
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("feature_store.%s = %d after 1m, want %d: %v", field, got, want, mountStats(t, m)["feature_store"])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// storeObject reads one object of the feature store bucket with its user
// metadata.
func storeObject(t testing.TB, srv *testenv.MinIO, bucketName, key string) ([]byte, map[string]string) {
	t.Helper()
	out, err := srv.Client().GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucketName), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b, out.Metadata
}

// storeFeature is storeObject of a feature: its .npy bytes, decoded where
// the object is a compressed blob (featurefs-encoding ffz1).
func storeFeature(t testing.TB, srv *testenv.MinIO, bucketName, key string) ([]byte, map[string]string) {
	t.Helper()
	b, meta := storeObject(t, srv, bucketName, key)
	if meta[featurestore.MetaEncoding] == featurestore.EncodingFFZ1 {
		raw, err := codec.Decode(nil, b)
		if err != nil {
			t.Fatalf("%s: a damaged blob: %v", key, err)
		}
		return raw, meta
	}
	return b, meta
}

// TestFeatureStoreSharedByTwoMounts: mount A (its own cache) computes a
// layer and fills the feature store; mount B, with a cold cache of its own,
// reads the whole layer with zero extractions and byte-identical files. The
// store's layout is the documented one, with _model.json and the
// metadata; a feature object with a flipped byte or foreign metadata is
// detected and computed again; an overwritten source object is recomputed,
// never served stale; --feature-store-only serves what the store has and
// fails the rest with EIO.
func TestFeatureStoreSharedByTwoMounts(t *testing.T) {
	d := genDataset(t, "--classes", "2", "--train", "3", "--val", "1")
	srv, env := minioBucket(t, "data", "", d.Dir)
	srv.CreateBucket(t, "features")
	names := featureNames(d.keys(t))
	store := []string{"--endpoint-url", srv.Endpoint, "--feature-store", "s3://features/shared", "--metadata-ttl", "1s"}

	a := testMount(t, mountConfig{Source: "s3://data", Env: env, Args: append([]string{"--prefetch", "off"}, store...)})
	fromA := readLayer(t, a, names)
	waitStoreField(t, a, "puts", int64(len(names)))
	if n := extractionCount(t, mountStats(t, a)); n != int64(len(names)) {
		t.Errorf("mount A: %d extractions for %d files", n, len(names))
	}

	// The layout: PREFIX/<model>-<layer digest12>/_model.json and
	// PREFIX/<model>-<layer digest12>/<layer>/<name>, each with its
	// metadata; the manifest gives the model file's digest.
	onnx, err := os.ReadFile(testenv.Model(t, modelName))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(onnx)
	digest := hex.EncodeToString(sum[:])
	modelDir := "shared/" + modelName + "-" + layerDigest12(t, testenv.Model(t, modelName), testLayer)
	mf, _ := storeObject(t, srv, "features", modelDir+"/_model.json")
	var manifest struct {
		Digest string `json:"digest"`
		DType  string `json:"dtype"`
		Layers []struct {
			Name  string  `json:"name"`
			Shape []int64 `json:"shape"`
		} `json:"layers"`
	}
	if err := json.Unmarshal(mf, &manifest); err != nil || manifest.Digest != digest || manifest.DType != "float32" || len(manifest.Layers) < 13 {
		t.Fatalf("_model.json: %v %s", err, mf)
	}
	var anyKey string
	for key, name := range names {
		b, meta := storeFeature(t, srv, "features", modelDir+"/"+testLayer+"/"+name)
		if meta["featurefs-encoding"] != "ffz1" || meta["featurefs-schema"] != "2" {
			t.Errorf("store object of %s: metadata %v; want it compressed (the default)", key, meta)
		}
		if !bytes.Equal(b, fromA[key]) {
			t.Errorf("store object of %s differs from mount A's file", key)
		}
		h := sha256.Sum256(b)
		if meta["featurefs-sha256"] != hex.EncodeToString(h[:]) || meta["featurefs-etag"] == "" || len(meta["featurefs-key"]) != 32 {
			t.Errorf("store object of %s: metadata %v", key, meta)
		}
		anyKey = key
	}

	// Mount B, cold cache: every file from the store, none computed.
	b := testMount(t, mountConfig{Source: "s3://data", Env: env, Args: append([]string{"--prefetch", "off"}, store...)})
	fromB := readLayer(t, b, names)
	for key := range names {
		if !bytes.Equal(fromA[key], fromB[key]) {
			t.Errorf("mount B's %s differs from mount A's", names[key])
		}
	}
	sb := mountStats(t, b)
	if n := extractionCount(t, sb); n != 0 {
		t.Errorf("mount B: %d extractions, want 0 (all from the feature store)", n)
	}
	if h := statsField(t, sb, "feature_store.hits"); h != int64(len(names)) {
		t.Errorf("mount B: %d feature store hits, want %d", h, len(names))
	}

	// A damaged feature object (one byte flipped, metadata kept) and one
	// whose metadata names another cache key are computed again by a mount
	// with a cold cache, and the answer is still right.
	damaged, meta := storeObject(t, srv, "features", modelDir+"/"+testLayer+"/"+names[anyKey])
	damaged[len(damaged)-1] ^= 0x40
	putWithMeta(t, srv, "features", modelDir+"/"+testLayer+"/"+names[anyKey], damaged, meta)
	var other string
	for key := range names {
		if key != anyKey {
			other = key
			break
		}
	}
	ob, ometa := storeObject(t, srv, "features", modelDir+"/"+testLayer+"/"+names[other])
	ometa["featurefs-key"] = strings.Repeat("0", 32)
	putWithMeta(t, srv, "features", modelDir+"/"+testLayer+"/"+names[other], ob, ometa)
	c := testMount(t, mountConfig{Source: "s3://data", Env: env, Args: append([]string{"--prefetch", "off"}, store...)})
	fromC := readLayer(t, c, map[string]string{anyKey: names[anyKey], other: names[other]})
	if !bytes.Equal(fromC[anyKey], fromA[anyKey]) || !bytes.Equal(fromC[other], fromA[other]) {
		t.Error("mount C served a damaged or foreign feature object")
	}
	sc := mountStats(t, c)
	if n, mm := extractionCount(t, sc), statsField(t, sc, "feature_store.mismatches"); n != 2 || mm != 2 {
		t.Errorf("mount C: %d extractions and %d mismatches, want 2 and 2", n, mm)
	}
	waitStoreField(t, c, "puts", 2) // and the store is repaired
	if fixed, _ := storeFeature(t, srv, "features", modelDir+"/"+testLayer+"/"+names[anyKey]); !bytes.Equal(fixed, fromA[anyKey]) {
		t.Error("the damaged feature object was not rewritten")
	}

	// An overwritten source object: mount B (whose cache and the store hold
	// the old version's feature) serves the new version's feature.
	imgs := d.images("train/")
	target, donor := imgs[0], imgs[1]
	newBytes, err := os.ReadFile(filepath.Join(d.Dir, filepath.FromSlash(donor.Key)))
	if err != nil {
		t.Fatal(err)
	}
	srv.Put(t, "data", target.Key, newBytes)
	time.Sleep(2 * time.Second) // the 1s metadata TTL
	after, err := os.ReadFile(filepath.Join(b.Layer(testLayer), filepath.FromSlash(names[target.Key])))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(after, fromA[target.Key]) {
		t.Fatalf("%s: the old version's feature was served after the object was overwritten", names[target.Key])
	}
	if !bytes.Equal(after, fromA[donor.Key]) {
		t.Errorf("%s: not the feature of the new bytes", names[target.Key])
	}

	// Store only: a mount that never computes serves the store's features
	// and fails one that is not there (the overwritten object's new
	// version, not yet written by B if B's write is still queued, is
	// replaced by a fresh object) with EIO.
	srv.Put(t, "data", "train/new-one.jpg", newBytes)
	so := testMount(t, mountConfig{Source: "s3://data", Env: env, Args: append([]string{"--prefetch", "off", "--feature-store-only"}, store...)})
	// A key the test did not overwrite (other and anyKey are picked from a
	// map: either can be the overwritten target, whose feature changed).
	kept := anyKey
	if kept == target.Key {
		kept = other
	}
	if got, err := os.ReadFile(filepath.Join(so.Layer(testLayer), filepath.FromSlash(names[kept]))); err != nil || !bytes.Equal(got, fromA[kept]) {
		t.Errorf("store-only mount: %s: %v, or not the bytes mount A served", names[kept], err)
	}
	_, err = os.ReadFile(filepath.Join(so.Layer(testLayer), "train", "new-one.npy"))
	if !errors.Is(err, syscall.EIO) {
		t.Errorf("store-only mount, a feature the store lacks: %v, want EIO", err)
	}
	if n := extractionCount(t, mountStats(t, so)); n != 0 {
		t.Errorf("store-only mount: %d extractions, want 0", n)
	}
	if log, _ := os.ReadFile(so.Log); !strings.Contains(string(log), "not extracted yet") {
		t.Errorf("store-only mount: the log does not say the feature is not extracted yet:\n%s", tail(so.Log, 3000))
	}
}

// putWithMeta writes an object with user metadata.
func putWithMeta(t *testing.T, srv *testenv.MinIO, bucketName, key string, data []byte, meta map[string]string) {
	t.Helper()
	_, err := srv.Client().PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(bucketName), Key: aws.String(key), Body: bytes.NewReader(data), Metadata: meta,
	})
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// TestFeatureStoreDown: the feature store is a MinIO of its own, stopped
// mid-epoch. Reads go on by computing, none hangs (each within the read
// timeout); a store-only mount fails with EIO within --read-timeout; once
// the store is back, writes resume.
func TestFeatureStoreDown(t *testing.T) {
	d := genDataset(t, "--classes", "2", "--train", "3", "--val", "1")
	srv, env := minioBucket(t, "data", "", d.Dir)
	fst := testenv.StartMinIO(t)
	fst.CreateBucket(t, "features")
	env = profileEnv(t, env, "fst", fst)
	names := featureNames(d.keys(t))
	args := []string{"--prefetch", "off", "--endpoint-url", srv.Endpoint, "--feature-store", "s3://features",
		"--feature-store-endpoint-url", fst.Endpoint, "--feature-store-profile", "fst", "--read-timeout", "20s", "--metadata-ttl", "1s"}
	m := testMount(t, mountConfig{Source: "s3://data", Env: env, Args: args})

	keys := make([]string, 0, len(names))
	for k := range names {
		keys = append(keys, k)
	}
	first := keys[:len(keys)/2]
	for _, k := range first {
		if _, err := os.ReadFile(filepath.Join(m.Layer(testLayer), filepath.FromSlash(names[k]))); err != nil {
			t.Fatal(err)
		}
	}
	waitStoreField(t, m, "puts", int64(len(first)))

	fst.Stop(t)
	for _, k := range keys[len(keys)/2:] {
		start := time.Now()
		if _, err := os.ReadFile(filepath.Join(m.Layer(testLayer), filepath.FromSlash(names[k]))); err != nil {
			t.Fatalf("read with the feature store down: %v", err)
		}
		if el := time.Since(start); el > 20*time.Second {
			t.Errorf("read with the feature store down took %v", el)
		}
	}
	s := mountStats(t, m)
	if e, sk := statsField(t, s, "feature_store.get_errors"), statsField(t, s, "feature_store.skipped"); e+sk == 0 {
		t.Errorf("store down: no failed or skipped feature store reads counted: %v", s["feature_store"])
	}
	// Nothing piles up for a store that is down: its writes are dropped
	// (counted), not queued.
	if q, dr := statsField(t, s, "feature_store.queued_bytes"), statsField(t, s, "feature_store.dropped"); q != 0 || dr == 0 {
		t.Errorf("store down: %d bytes queued and %d writes dropped, want 0 queued and some dropped", q, dr)
	}
	if !strings.Contains(tail(m.Log, 20000), "feature store failing") {
		t.Errorf("store down: not logged:\n%s", tail(m.Log, 3000))
	}

	so := testMount(t, mountConfig{Source: "s3://data", Env: env, Args: append(args, "--feature-store-only", "--read-timeout", "5s")})
	start := time.Now()
	_, err := os.ReadFile(filepath.Join(so.Layer(testLayer), filepath.FromSlash(names[first[0]])))
	if !errors.Is(err, syscall.EIO) {
		t.Errorf("store-only with the store down: %v, want EIO", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("store-only with the store down: EIO after %v (read timeout 5s)", el)
	}

	// Back up: after the backoff, a computed feature is written again.
	fst.Start(t)
	time.Sleep(6 * time.Second) // featurestore.DefaultBackoff
	before := statsField(t, mountStats(t, m), "feature_store.puts")
	srv.Put(t, "data", "train/late.jpg", mustRead(t, filepath.Join(d.Dir, filepath.FromSlash(first[0]))))
	time.Sleep(2 * time.Second) // the 1s metadata TTL
	if _, err := os.ReadFile(filepath.Join(m.Layer(testLayer), "train", "late.npy")); err != nil {
		t.Fatal(err)
	}
	waitStoreField(t, m, "puts", before+1)
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFeatureStoreErasureCoded: the feature store is one MinIO server over
// 4 drive directories (erasure-coded). Mount A fills it; one drive
// directory is deleted; mount B, with a cold cache, still reads every
// feature from the store, byte-identical, with zero extractions.
func TestFeatureStoreErasureCoded(t *testing.T) {
	d := genDataset(t, "--classes", "2", "--train", "2", "--val", "1")
	srv, env := minioBucket(t, "data", "", d.Dir)
	ec := testenv.StartMinIODrives(t, 4)
	ec.CreateBucket(t, "features")
	env = profileEnv(t, env, "ec", ec)
	names := featureNames(d.keys(t))
	args := []string{"--prefetch", "off", "--endpoint-url", srv.Endpoint, "--feature-store", "s3://features/ec",
		"--feature-store-endpoint-url", ec.Endpoint, "--feature-store-profile", "ec"}
	a := testMount(t, mountConfig{Source: "s3://data", Env: env, Args: args})
	fromA := readLayer(t, a, names)
	waitStoreField(t, a, "puts", int64(len(names)))

	if err := os.RemoveAll(ec.Drives[1]); err != nil {
		t.Fatal(err)
	}
	b := testMount(t, mountConfig{Source: "s3://data", Env: env, Args: args})
	fromB := readLayer(t, b, names)
	for key := range names {
		if !bytes.Equal(fromA[key], fromB[key]) {
			t.Errorf("%s differs after a drive was lost", names[key])
		}
	}
	s := mountStats(t, b)
	if n, h := extractionCount(t, s), statsField(t, s, "feature_store.hits"); n != 0 || h != int64(len(names)) {
		t.Errorf("after a drive was lost: %d extractions and %d store hits, want 0 and %d", n, h, len(names))
	}
}

// profileEnv returns env with a shared-credentials file holding profile
// name with m's root credentials: a feature store on a MinIO of its own,
// reached with --feature-store-profile (the source's credentials stay in
// the environment).
func profileEnv(t *testing.T, env []string, name string, m *testenv.MinIO) []string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "credentials")
	text := fmt.Sprintf("[%s]\naws_access_key_id = %s\naws_secret_access_key = %s\n", name, m.AccessKey, m.SecretKey)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return append(env, "AWS_SHARED_CREDENTIALS_FILE="+p)
}

// TestFeatureStoreWarmThenStoreOnly is the storage-side flow of
// docs/FEATURE-STORE.md: `featurefs warm --source ... --feature-store`
// fills the store (exit 0, every image done); a store-only mount with a
// cold cache then reads the whole layer from it with zero extractions. A
// second warm on another host whose local cache holds nothing finds every
// feature in the store and writes nothing more.
func TestFeatureStoreWarmThenStoreOnly(t *testing.T) {
	d := genDataset(t, "--classes", "2", "--train", "3", "--val", "1")
	srv, env := minioBucket(t, "data", "", d.Dir)
	srv.CreateBucket(t, "features")
	names := featureNames(d.keys(t))
	warm := func(cacheDir string) string {
		cmd := exec.Command(featurefsBin(t), "warm", "--source", "s3://data", "--endpoint-url", srv.Endpoint,
			"--model", modelName+"="+testenv.Model(t, modelName), "--layer", testLayer, "--cache-dir", cacheDir,
			"--device", "cpu", "--feature-store", "s3://features/w")
		cmd.Env = append(append(os.Environ(), "FEATUREFS_ORT_LIB="+testenv.ORTLib(t)), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("featurefs warm --feature-store: %v\n%s", err, out)
		}
		if want := fmt.Sprintf("%d of %d done", len(names), len(names)); !strings.Contains(string(out), want) {
			t.Errorf("warm: want %q in:\n%s", want, out)
		}
		return string(out)
	}
	if out, want := warm(filepath.Join(t.TempDir(), "cache1")), fmt.Sprintf("0 features found there, %d written (0 failed, 0 dropped)", len(names)); !strings.Contains(out, want) {
		t.Errorf("first warm: want %q in:\n%s", want, out)
	}

	m := testMount(t, mountConfig{Source: "s3://data", Env: env, Args: []string{"--endpoint-url", srv.Endpoint,
		"--feature-store", "s3://features/w", "--feature-store-only"}})
	got := readLayer(t, m, names)
	if n := extractionCount(t, mountStats(t, m)); n != 0 {
		t.Errorf("store-only mount after warm: %d extractions, want 0", n)
	}
	dir := "w/" + modelName + "-" + layerDigest12(t, testenv.Model(t, modelName), testLayer) + "/" + testLayer + "/"
	for key, name := range names {
		b, _ := storeFeature(t, srv, "features", dir+name)
		if !bytes.Equal(b, got[key]) {
			t.Errorf("%s: the mount's file differs from the store's object", name)
		}
	}

	// Another host, cold cache: everything is in the store already.
	out := warm(filepath.Join(t.TempDir(), "cache2"))
	if want := fmt.Sprintf("%d features found there, 0 written", len(names)); !strings.Contains(out, want) {
		t.Errorf("second warm: want %q in:\n%s", want, out)
	}
}

// serveStats returns GET /v1/stats of a featurefs serve.
func serveStats(t *testing.T, s *served) map[string]any {
	t.Helper()
	req, err := http.NewRequest("GET", s.URL+"/v1/stats", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /v1/stats: %d, %v", resp.StatusCode, err)
	}
	return v
}

// TestFeatureStoreSharedByServers: two feature servers (featurefs serve)
// with caches of their own share one feature store. Server A computes what
// a remote mount reads and fills the store; server B, cold, serves a second
// remote mount the same bytes with zero extractions.
func TestFeatureStoreSharedByServers(t *testing.T) {
	d := genDataset(t, "--classes", "2", "--train", "2", "--val", "1")
	srv, env := minioBucket(t, "data", "", d.Dir)
	srv.CreateBucket(t, "features")
	names := featureNames(d.keys(t))
	store := []string{"--endpoint-url", srv.Endpoint, "--feature-store", "s3://features/servers"}

	a := startServe(t, "s3://data", env, store...)
	ma := testMount(t, mountConfig{Args: a.remoteArgs("--prefetch", "off"), NoModel: true})
	fromA := readLayer(t, ma, names)
	deadline := time.Now().Add(time.Minute)
	for statsField(t, serveStats(t, a), "fs.feature_store.puts") < int64(len(names)) {
		if time.Now().After(deadline) {
			t.Fatalf("server A wrote %d of %d features to the store in 1m", statsField(t, serveStats(t, a), "fs.feature_store.puts"), len(names))
		}
		time.Sleep(100 * time.Millisecond)
	}

	b := startServe(t, "s3://data", env, store...)
	mb := testMount(t, mountConfig{Args: b.remoteArgs("--prefetch", "off"), NoModel: true})
	fromB := readLayer(t, mb, names)
	for key := range names {
		if !bytes.Equal(fromA[key], fromB[key]) {
			t.Errorf("%s: server B's feature differs from server A's", names[key])
		}
	}
	sb := serveStats(t, b)
	if n, h := statsField(t, sb, "fs.fs.extractions"), statsField(t, sb, "fs.feature_store.hits"); n != 0 || h != int64(len(names)) {
		t.Errorf("server B: %d extractions and %d store hits, want 0 and %d", n, h, len(names))
	}
}
