package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/featurefs/featurefs/fs/bucket"
)

// minioReadyTimeout bounds how long StartMinIO waits for the server.
const minioReadyTimeout = 60 * time.Second

// MinIO is a real MinIO server on 127.0.0.1, started by StartMinIO with a
// temporary data directory and random root credentials, and killed when the
// test ends.
type MinIO struct {
	// Endpoint is the S3 endpoint URL, "http://127.0.0.1:PORT".
	Endpoint string
	// AccessKey is the root user (AWS_ACCESS_KEY_ID).
	AccessKey string
	// SecretKey is the root password (AWS_SECRET_ACCESS_KEY).
	SecretKey string
	// DataDir is the server's data directory.
	DataDir string
	// Drives are the drive directories of an erasure-coded server
	// (StartMinIODrives), inside DataDir; nil for a single-directory one.
	Drives []string

	bin, addr, consoleAddr, logPath string
	client                          *s3.Client

	mu   sync.Mutex
	cmd  *exec.Cmd     // GUARDED_BY(mu); nil while stopped
	done chan struct{} // GUARDED_BY(mu); closed when cmd exits
}

// StartMinIO starts MinIO (MinIOBin) on a free 127.0.0.1 port and waits until
// it is ready. Nothing it does reaches beyond 127.0.0.1: the console, update
// checks and call-home are off. t.Cleanup stops it.
func StartMinIO(t testing.TB) *MinIO {
	t.Helper()
	return startMinIO(t, 0)
}

// StartMinIODrives is StartMinIO in erasure-coded mode: one server over
// drives drive directories (DataDir/d1 ... d<drives>), so that objects
// survive the loss of a drive.
func StartMinIODrives(t testing.TB, drives int) *MinIO {
	t.Helper()
	return startMinIO(t, drives)
}

func startMinIO(t testing.TB, drives int) *MinIO {
	t.Helper()
	m := &MinIO{
		bin:       MinIOBin(t),
		AccessKey: "fft" + randHex(t, 8),
		SecretKey: randHex(t, 20),
		DataDir:   t.TempDir(),
	}
	for i := range drives {
		d := filepath.Join(m.DataDir, fmt.Sprintf("d%d", i+1))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		m.Drives = append(m.Drives, d)
	}
	m.logPath = filepath.Join(t.TempDir(), "minio.log")
	t.Cleanup(func() { m.stop() })
	// A free port can be taken between probing and MinIO binding it: retry.
	var err error
	for range 3 {
		m.addr, m.consoleAddr = freeAddr(t), freeAddr(t)
		if err = m.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("testenv: starting MinIO: %v", err)
	}
	m.Endpoint = "http://" + m.addr
	m.client = s3.New(s3.Options{
		BaseEndpoint: aws.String(m.Endpoint),
		UsePathStyle: true,
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider(m.AccessKey, m.SecretKey, ""),
	})
	return m
}

// Env returns the environment a child process (featurefs mount) needs to
// reach this server with the default credential chain.
func (m *MinIO) Env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + m.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + m.SecretKey,
		"AWS_REGION=us-east-1",
		"AWS_EC2_METADATA_DISABLED=true",
	}
}

// S3Options returns bucket options for this server: its endpoint, region
// and static root credentials, with short timeouts suited to tests.
func (m *MinIO) S3Options() bucket.S3Options {
	o := bucket.DefaultS3Options()
	o.Endpoint = m.Endpoint
	o.Region = "us-east-1"
	o.PathStyle = true
	o.Timeout = 10 * time.Second
	o.ProbeTimeout = 5 * time.Second
	o.Credentials = credentials.NewStaticCredentialsProvider(m.AccessKey, m.SecretKey, "")
	return o
}

// Client returns an S3 client with the root credentials.
func (m *MinIO) Client() *s3.Client { return m.client }

// CreateBucket creates bucket name.
func (m *MinIO) CreateBucket(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := m.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("testenv: MinIO create bucket %s: %v", name, err)
	}
}

// Put stores data as bucket/key.
func (m *MinIO) Put(t testing.TB, bucketName, key string, data []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := m.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(bucketName),
		Key:           aws.String(key),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
	})
	if err != nil {
		t.Fatalf("testenv: MinIO put %s/%s: %v", bucketName, key, err)
	}
}

// Delete removes bucket/key.
func (m *MinIO) Delete(t testing.TB, bucketName, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := m.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucketName), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("testenv: MinIO delete %s/%s: %v", bucketName, key, err)
	}
}

// Stop stops the server (for fault tests); Start brings it back.
func (m *MinIO) Stop(t testing.TB) {
	t.Helper()
	if err := m.stop(); err != nil {
		t.Fatalf("testenv: stopping MinIO: %v", err)
	}
}

// Pause stops the server process with SIGSTOP (for fault tests): its port
// still accepts connections, but nothing answers (a stalled store). Resume
// lets it go on.
func (m *MinIO) Pause(t testing.TB) { m.signal(t, syscall.SIGSTOP) }

// Resume continues a paused server.
func (m *MinIO) Resume(t testing.TB) { m.signal(t, syscall.SIGCONT) }

func (m *MinIO) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	m.mu.Lock()
	cmd := m.cmd
	m.mu.Unlock()
	if cmd == nil {
		t.Fatalf("testenv: MinIO %v: not running", sig)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatalf("testenv: MinIO %v: %v", sig, err)
	}
}

// Start restarts a stopped server on the same port and data directory and
// waits until it is ready.
func (m *MinIO) Start(t testing.TB) {
	t.Helper()
	m.mu.Lock()
	running := m.cmd != nil
	m.mu.Unlock()
	if running {
		t.Fatal("testenv: MinIO.Start: already running")
	}
	if err := m.start(); err != nil {
		t.Fatalf("testenv: restarting MinIO: %v", err)
	}
}

func (m *MinIO) start() error {
	logf, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	dirs := m.Drives
	if len(dirs) == 0 {
		dirs = []string{m.DataDir}
	}
	cmd := exec.Command(m.bin, append([]string{"server", "--quiet", "--anonymous",
		"--address", m.addr, "--console-address", m.consoleAddr}, dirs...)...)
	cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+m.AccessKey,
		"MINIO_ROOT_PASSWORD="+m.SecretKey,
		"MINIO_BROWSER=off",
		"MINIO_UPDATE=off",
		"MINIO_CALLHOME_ENABLE=off",
		"MINIO_CI_CD=1",
		"MINIO_SCANNER_SPEED=slowest",
		"MINIO_PROMETHEUS_AUTH_TYPE=public", // GetObjects reads the request counters
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", m.bin, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	m.mu.Lock()
	m.cmd, m.done = cmd, done
	m.mu.Unlock()

	url := "http://" + m.addr + "/minio/health/ready"
	deadline := time.Now().Add(minioReadyTimeout)
	hc := &http.Client{Timeout: 2 * time.Second}
	for time.Now().Before(deadline) {
		select {
		case <-done:
			m.mu.Lock()
			m.cmd = nil
			m.mu.Unlock()
			return fmt.Errorf("minio exited during startup: %s", m.logTail())
		case <-time.After(50 * time.Millisecond):
		}
		resp, err := hc.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	m.stop()
	return fmt.Errorf("minio not ready after %v: %s", minioReadyTimeout, m.logTail())
}

func (m *MinIO) stop() error {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.cmd = nil
	m.mu.Unlock()
	if cmd == nil {
		return nil
	}
	cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot act on SIGTERM
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
	// The port must be free before a restart can bind it again.
	for range 100 {
		c, err := net.DialTimeout("tcp", m.addr, 100*time.Millisecond)
		if err != nil {
			return nil
		}
		c.Close()
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("port " + m.addr + " still accepting after MinIO exited")
}

func (m *MinIO) logTail() string {
	b, _ := os.ReadFile(m.logPath)
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}

// freeAddr returns a 127.0.0.1 address with a port that was free just now.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func randHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// GetObjects returns the GetObject requests the server has answered since
// it started (its Prometheus metrics, minio_api_requests_total of
// /minio/metrics/v3/api/requests, read fresh: v2's are cached a while).
func (m *MinIO) GetObjects(t testing.TB) int64 {
	t.Helper()
	resp, err := http.Get("http://" + m.addr + "/minio/metrics/v3/api/requests")
	if err != nil {
		t.Fatalf("testenv: MinIO metrics: %v", err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("testenv: MinIO metrics: %s, %v", resp.Status, err)
	}
	var n float64
	for line := range strings.SplitSeq(buf.String(), "\n") {
		if strings.HasPrefix(line, "minio_api_requests_total{") && strings.Contains(line, `name="GetObject"`) {
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
				n += v
			}
		}
	}
	return int64(n)
}
