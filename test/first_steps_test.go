package test

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// What a new user stumbles on (issue 24, section 10), through the real
// binary: each message says what is wrong and what to do, and the
// examples of the README work as written.

// TestHelpNamesEveryForm: `featurefs -h` shows every form of a command a
// user needs, including `mount --remote` and `warm --source` (it used to
// show neither).
func TestHelpNamesEveryForm(t *testing.T) {
	r := runCLI(t, time.Minute, nil, "-h")
	if r.Code != 0 {
		t.Fatalf("featurefs -h: %s", r)
	}
	for _, want := range []string{
		"featurefs mount [flags] SOURCE MOUNTPOINT",
		"featurefs mount --remote URL[,URL...] [flags] MOUNTPOINT",
		"featurefs warm PATH",
		"featurefs warm --source SOURCE --model NAME=M.onnx --layer LAYER [PREFIX]",
		"featurefs serve [flags] SOURCE",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("featurefs -h lacks %q:\n%s", want, r.Stdout)
		}
	}
}

// TestTensorRTWithoutGPUSaysWhatRunsOnTheCPU: --tensorrt on a machine
// without a GPU exits 4 with a hint that works: under --device auto (the
// default) it says to leave out --tensorrt, not to pass --device auto,
// which was in effect already; with --device cuda the hint names both.
// Through mount, serve and extract.
func TestTensorRTWithoutGPUSaysWhatRunsOnTheCPU(t *testing.T) {
	model := testenv.Model(t, modelName)
	work := t.TempDir()
	src := filepath.Join(work, "src")
	writeJPEG(t, filepath.Join(src, "a.jpg"), 64, 48, 1)
	mnt := filepath.Join(work, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what   string
		args   []string
		want   []string
		refuse string
	}{
		{"mount --tensorrt", []string{"mount", "--foreground", "--model", modelName + "=" + model, "--cache-dir", filepath.Join(work, "c1"),
			"--log-file", filepath.Join(work, "m.log"), "--tensorrt", src, mnt},
			[]string{"--device auto with TensorRT: no usable GPU", "without --tensorrt, or with --allow-cpu-fallback, it runs on the CPU"}, "--device auto or cpu"},
		{"serve --tensorrt", []string{"serve", "--no-auth", "--listen", "127.0.0.1:0", "--model", modelName + "=" + model,
			"--cache-dir", filepath.Join(work, "c2"), "--log-file", filepath.Join(work, "s.log"), "--tensorrt", src},
			[]string{"--device auto with TensorRT: no usable GPU", "without --tensorrt"}, "--device auto or cpu"},
		{"extract --tensorrt", []string{"extract", "--model", model, "--layer", "0", "-o", filepath.Join(work, "out"),
			"--tensorrt", filepath.Join(src, "a.jpg")},
			[]string{"--device auto with TensorRT: no usable GPU", "without --tensorrt"}, "--device auto or cpu"},
		{"mount --device cuda --tensorrt", []string{"mount", "--foreground", "--model", modelName + "=" + model, "--cache-dir", filepath.Join(work, "c3"),
			"--log-file", filepath.Join(work, "m.log"), "--device", "cuda", "--tensorrt", src, mnt},
			[]string{"--device cuda with TensorRT: no usable GPU", "--device auto or cpu without --tensorrt, or --allow-cpu-fallback"}, ""},
	} {
		r := runCLI(t, 3*time.Minute, nil, c.args...)
		checkExit(t, c.what, exitCase{name: "no GPU", code: 4, want: c.want}, r)
		if c.refuse != "" && strings.Contains(r.Stderr, c.refuse) {
			t.Errorf("%s: the hint suggests %q, which is in effect:\n%s", c.what, c.refuse, r.Stderr)
		}
	}
}

// TestConfigTypoListsValidKeys: a misspelt key in --config exits 2 naming
// the key, the likely one and every valid key, never a Go type (it used
// to say "field cache_dir not found in type mountopts.fileOptions").
func TestConfigTypoListsValidKeys(t *testing.T) {
	work := t.TempDir()
	cfg := filepath.Join(work, "featurefs.yaml")
	if err := os.WriteFile(cfg, []byte("models:\n  resnet50: {path: "+testenv.Model(t, modelName)+"}\ncache_dir: /tmp/x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(work, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"mount", "--foreground", "--config", cfg, work, mnt},
		{"serve", "--no-auth", "--config", cfg, work},
		{"warm", "--config", cfg, "--source", work, "--layer", "layer0"},
	} {
		r := runCLI(t, time.Minute, nil, args...)
		if r.Code != 2 {
			t.Errorf("%s with a config typo: exit %d, want 2\n%s", args[0], r.Code, r)
			continue
		}
		for _, want := range []string{cfg, `line 3: unknown key "cache_dir" (did you mean "cache-dir"?); valid keys: `,
			"cache-dir, cache-size", "metadata-ttl, metrics-addr, models,"} {
			if !strings.Contains(r.Stderr, want) {
				t.Errorf("%s with a config typo: stderr lacks %q:\n%s", args[0], want, r.Stderr)
			}
		}
		if strings.Contains(r.Stderr, "mountopts.") || strings.Contains(r.Stderr, "not found in type") {
			t.Errorf("%s with a config typo names a Go type:\n%s", args[0], r.Stderr)
		}
	}
}

// TestWarmRefusesMountOnlyFlags: warm takes the mount flags that describe
// the source, models and cache, but those of a mount alone (--remote,
// --allow-other, --split, ...) exit 2 with a message naming them, before
// anything is opened or walked (they used to be accepted and ignored).
func TestWarmRefusesMountOnlyFlags(t *testing.T) {
	work := t.TempDir()
	writeJPEG(t, filepath.Join(work, "src", "a.jpg"), 64, 48, 1)
	base := []string{"warm", "--source", filepath.Join(work, "src"), "--model", modelName + "=" + testenv.Model(t, modelName),
		"--layer", "layer0", "--cache-dir", filepath.Join(work, "cache"), "--device", "cpu"}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--remote", "http://127.0.0.1:1"}, []string{"--remote: a flag of featurefs mount only", "featurefs warm MOUNT/features/"}},
		{[]string{"--allow-other"}, []string{"--allow-other: a flag of featurefs mount only"}},
		{[]string{"--split", "auto", "--allow-other"}, []string{"--allow-other, --split: flags of featurefs mount only"}},
	} {
		r := runCLI(t, time.Minute, nil, append(append([]string{}, base...), c.args...)...)
		if r.Code != 2 || r.Stdout != "" || len(lines(r.Stderr)) != 1 {
			t.Errorf("warm %s: want exit 2, nothing on stdout and one line on stderr:\n%s", strings.Join(c.args, " "), r)
		}
		for _, w := range c.want {
			if !strings.Contains(r.Stderr, w) {
				t.Errorf("warm %s: stderr lacks %q:\n%s", strings.Join(c.args, " "), w, r.Stderr)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(work, "cache")); err == nil {
		t.Errorf("a refused warm opened the cache directory")
	}
	// Through a mount's PATH too.
	r := runCLI(t, time.Minute, nil, "warm", "--allow-other", work)
	if r.Code != 2 || !strings.Contains(r.Stderr, "--allow-other: a flag of featurefs mount only") {
		t.Errorf("warm --allow-other PATH: want exit 2 naming the flag:\n%s", r)
	}
	// warm -h does not offer them.
	h := runCLI(t, time.Minute, nil, "warm", "-h")
	for _, f := range []string{"  -remote ", "  -split ", "  -allow-other\n", "  -metrics-addr "} {
		if strings.Contains(h.Stderr, f) {
			t.Errorf("warm -h offers %q:\n%s", strings.TrimSpace(f), h.Stderr)
		}
	}
	if !strings.Contains(h.Stderr, "  -cache-dir ") || !strings.Contains(h.Stderr, "  -layer ") {
		t.Errorf("warm -h lacks --cache-dir or --layer:\n%s", h.Stderr)
	}
}

// TestUnreachableFeatureStoreWarnsOnTheTerminal: a feature store that does
// not answer when a mount starts is a warning, not an exit, and the user
// hears it on the terminal of the mounting command (it used to be in the
// log only), daemonizing or not, under --feature-store-only saying that
// reads fail; the same for serve and warm --source.
func TestUnreachableFeatureStoreWarnsOnTheTerminal(t *testing.T) {
	work := t.TempDir()
	src := filepath.Join(work, "src")
	writeJPEG(t, filepath.Join(src, "a.jpg"), 64, 48, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there: connections are refused
	env := []string{"AWS_ACCESS_KEY_ID=x", "AWS_SECRET_ACCESS_KEY=y", "AWS_REGION=us-east-1",
		"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=/nonexistent", "AWS_SHARED_CREDENTIALS_FILE=/nonexistent"}
	store := []string{"--feature-store", "s3://features/x", "--feature-store-endpoint-url", dead}
	want := "warning: --feature-store s3://features/x does not answer"

	// Daemonizing: the parent prints the child's warning before it returns.
	mnt := filepath.Join(work, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(work, "mount.log")
	r := runCLI(t, 3*time.Minute, env, append([]string{"mount", "--model", modelName + "=" + testenv.Model(t, modelName),
		"--cache-dir", filepath.Join(work, "c1"), "--device", "cpu", "--log-file", logFile}, append(store, src, mnt)...)...)
	if r.Code != 0 {
		t.Fatalf("mount with an unreachable feature store: %s", r)
	}
	d := daemonOf(t, r, mnt, logFile)
	if n := len(linesWith(r.Stderr, "featurefs mount: "+want, "reads compute what the cache lacks until it answers")); n != 1 {
		t.Errorf("mount (daemonizing): %d warning lines about the feature store on stderr, want 1:\n%s", n, r.Stderr)
	}
	d.Unmount(t)

	// Store-only says that reads of what the cache lacks fail.
	fg := exec.Command(featurefsBin(t), append([]string{"mount", "--foreground", "--model", modelName + "=" + testenv.Model(t, modelName),
		"--cache-dir", filepath.Join(work, "c2"), "--device", "cpu", "--feature-store-only"}, append(store, src, mnt)...)...)
	fg.Env = cliEnv(t, env...)
	stderr, err := fg.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := fg.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		exec.Command("umount", mnt).Run()
		fg.Wait()
	}()
	sc := bufio.NewScanner(stderr)
	found := ""
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "featurefs mount: "+want) {
			found = l
			break
		}
		if strings.Contains(sc.Text(), "featurefs: mounted") {
			break
		}
	}
	if !strings.Contains(found, "reads of what the cache lacks fail (--feature-store-only)") {
		t.Errorf("mount --foreground --feature-store-only: no warning line on stderr saying reads fail (got %q)", found)
	}
	go func() {
		for sc.Scan() {
		}
	}()
	deadline := time.Now().Add(3 * time.Minute)
	for !isMounted(t, mnt) {
		if time.Now().After(deadline) {
			t.Fatalf("mount --foreground --feature-store-only: not mounted after 3m")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// serve: the warning comes before the listening line.
	sv := exec.Command(featurefsBin(t), append([]string{"serve", "--no-auth", "--listen", "127.0.0.1:0", "--model", modelName + "=" + testenv.Model(t, modelName),
		"--cache-dir", filepath.Join(work, "c4"), "--device", "cpu", "--log-file", filepath.Join(work, "serve.log")}, append(store, src)...)...)
	sv.Env = cliEnv(t, env...)
	svErr, err := sv.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sv.Start(); err != nil {
		t.Fatal(err)
	}
	var before []string
	ssc := bufio.NewScanner(svErr)
	for ssc.Scan() && !strings.HasPrefix(ssc.Text(), "featurefs serve: listening on ") {
		before = append(before, ssc.Text())
	}
	sv.Process.Signal(syscall.SIGTERM)
	go func() {
		for ssc.Scan() {
		}
	}()
	sv.Wait()
	if n := len(linesWith(strings.Join(before, "\n"), "featurefs serve: "+want)); n != 1 {
		t.Errorf("serve: %d warning lines about the feature store on stderr before it listens, want 1:\n%s", n, strings.Join(before, "\n"))
	}

	// warm --source.
	wr := runCLI(t, 3*time.Minute, env, append([]string{"warm", "--source", src, "--model", modelName + "=" + testenv.Model(t, modelName),
		"--layer", "layer0", "--cache-dir", filepath.Join(work, "c3"), "--device", "cpu"}, store...)...)
	if n := len(linesWith(wr.Stderr, "featurefs warm: "+want)); n != 1 {
		t.Errorf("warm --source: %d warning lines about the feature store on stderr, want 1:\n%s", n, wr)
	}
}

// TestRemoteUnknownCANamesRemoteCA: a mount of an https:// server whose
// certificate is signed by a private CA fails with exit 5 and says to pass
// --remote-ca (it used to give only Go's x509 error); with --remote-ca it
// mounts.
func TestRemoteUnknownCANamesRemoteCA(t *testing.T) {
	work := t.TempDir()
	src := filepath.Join(work, "src")
	writeJPEG(t, filepath.Join(src, "a.jpg"), 64, 48, 1)
	caFile, certFile, keyFile := writeTestCA(t, work)
	s := startServe(t, src, nil, "--tls-cert", certFile, "--tls-key", keyFile)
	if !strings.HasPrefix(s.URL, "https://") {
		t.Fatalf("serve with --tls-cert listens on %s", s.URL)
	}
	mnt := filepath.Join(work, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, 2*time.Minute, nil, "mount", "--foreground", "--cache-dir", filepath.Join(work, "c"), "--remote", s.URL,
		"--remote-token-file", s.TokenFile, mnt)
	checkExit(t, "mount --remote https:// without --remote-ca", exitCase{name: "unknown CA", code: 5,
		want: []string{"certificate signed by unknown authority", "pass --remote-ca FILE"}}, r)

	m := testMount(t, mountConfig{Args: s.remoteArgs("--remote-ca", caFile, "--prefetch", "off"), NoModel: true})
	if _, err := os.ReadFile(filepath.Join(m.Layer("layer0"), "a.npy")); err != nil {
		t.Errorf("a feature through https with --remote-ca: %v", err)
	}
}

// writeTestCA writes a CA certificate and a server certificate for
// 127.0.0.1 signed by it (PEM), returning their paths and the key's.
func writeTestCA(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "featurefs test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("cert.pem", "CERTIFICATE", der), write("key.pem", "EC PRIVATE KEY", keyDER)
}

// TestNearDataOnOneHostWithDefaults: README's near-data example run on one
// host as written, without --cache-dir: `featurefs serve` and `featurefs
// mount --remote` each take their own default cache directory
// (~/.cache/featurefs/serve-cache and ~/.cache/featurefs/cache), so the
// mount starts and reads through the server (it used to exit 6: both took
// ~/.cache/featurefs/cache, which the server had locked).
func TestNearDataOnOneHostWithDefaults(t *testing.T) {
	home := t.TempDir()
	src := filepath.Join(t.TempDir(), "src")
	writeJPEG(t, filepath.Join(src, "train", "cat", "a.jpg"), 64, 48, 1)
	tokenFile := filepath.Join(home, "token")
	if err := os.WriteFile(tokenFile, []byte("tok-near-data-one-host\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=" + home}
	srv := exec.Command(featurefsBin(t), "serve", "--listen", "127.0.0.1:0", "--token-file", tokenFile,
		"--model", modelName+"="+testenv.Model(t, modelName), "--device", "cpu", src)
	srv.Env = cliEnv(t, env...)
	stderr, err := srv.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "featurefs serve: listening on "); ok {
				urls <- u
			}
		}
		done <- srv.Wait()
	}()
	var url string
	select {
	case url = <-urls:
	case err := <-done:
		t.Fatalf("featurefs serve with the default cache directory exited: %v", err)
	case <-time.After(3 * time.Minute):
		srv.Process.Kill()
		t.Fatal("featurefs serve: not listening after 3m")
	}
	defer stopServe(t, srv, done)

	mnt := filepath.Join(home, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(home, "mount.log")
	r := runCLI(t, 3*time.Minute, env, "mount", "--remote", url, "--remote-token-file", tokenFile, "--log-file", logFile, mnt)
	if r.Code != 0 {
		t.Fatalf("mount --remote beside serve, both with the default cache directory: %s", r)
	}
	d := daemonOf(t, r, mnt, logFile)
	if _, err := os.ReadFile(d.Path("features", modelName, "layer0", "train", "cat", "a.npy")); err != nil {
		t.Errorf("a feature through the server: %v", err)
	}
	d.Unmount(t)
	for _, dir := range []string{"serve-cache", "cache"} {
		if _, err := os.Stat(filepath.Join(home, ".cache", "featurefs", dir)); err != nil {
			t.Errorf("default cache directory: %v", err)
		}
	}
}
