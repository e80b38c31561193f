package bucket_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/test/testenv"
)

type s3Store struct {
	m    *testenv.MinIO
	name string
}

func (s s3Store) open(t *testing.T, prefix string, opts bucket.S3Options) bucket.Bucket {
	t.Helper()
	o := s.m.S3Options()
	o.ListPageSize = opts.ListPageSize
	o.MaxObjectBytes = opts.MaxObjectBytes
	b, err := bucket.Open(context.Background(), "s3://"+s.name+"/"+prefix, o)
	if err != nil {
		t.Fatalf("Open(s3://%s/%s): %v", s.name, prefix, err)
	}
	return b
}

func (s s3Store) put(t *testing.T, key string, data []byte) { s.m.Put(t, s.name, key, data) }
func (s s3Store) del(t *testing.T, key string)              { s.m.Delete(t, s.name, key) }

func TestS3Conformance(t *testing.T) {
	m := testenv.StartMinIO(t)
	m.CreateBucket(t, "conf")
	testConformance(t, s3Store{m: m, name: "conf"})
}

func TestS3Identity(t *testing.T) {
	m := testenv.StartMinIO(t)
	m.CreateBucket(t, "ident")
	host := strings.TrimPrefix(m.Endpoint, "http://")
	for src, want := range map[string]string{
		"s3://ident":          "s3://" + host + "/ident/",
		"s3://ident/":         "s3://" + host + "/ident/",
		"s3://ident/a/b":      "s3://" + host + "/ident/a/b/",
		"s3://ident/a/b/":     "s3://" + host + "/ident/a/b/",
		"s3://ident/train/x/": "s3://" + host + "/ident/train/x/",
	} {
		b, err := bucket.Open(context.Background(), src, m.S3Options())
		if err != nil {
			t.Fatalf("Open(%s): %v", src, err)
		}
		if got := b.Identity(); got != want {
			t.Errorf("Open(%s).Identity() = %q, want %q", src, got, want)
		}
	}
}

// TestS3OpenErrors checks that Open fails fast with one clear message for
// the three usual setup mistakes.
func TestS3OpenErrors(t *testing.T) {
	m := testenv.StartMinIO(t)
	m.CreateBucket(t, "exists")
	ctx := context.Background()

	t.Run("Unreachable", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := "http://" + l.Addr().String()
		l.Close()
		o := m.S3Options()
		o.Endpoint = closed
		o.ProbeTimeout = 5 * time.Second
		start := time.Now()
		_, err = bucket.Open(ctx, "s3://exists", o)
		if !errors.Is(err, bucket.ErrUnreachable) {
			t.Fatalf("Open against a closed port = %v, want ErrUnreachable", err)
		}
		if elapsed := time.Since(start); elapsed > 8*time.Second {
			t.Errorf("Open took %v, want it bounded by the 5s probe timeout", elapsed)
		}
		msg := err.Error()
		if !strings.Contains(msg, "s3://exists: endpoint "+closed+" unreachable") || !strings.Contains(msg, "connection refused") {
			t.Errorf("message %q does not name the source, endpoint and cause", msg)
		}
		t.Log(msg)
	})

	t.Run("BlackHole", func(t *testing.T) {
		// A listener that accepts but never answers: the probe timeout ends it.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				defer c.Close()
			}
		}()
		o := m.S3Options()
		o.Endpoint = "http://" + l.Addr().String()
		o.ProbeTimeout = time.Second
		start := time.Now()
		_, err = bucket.Open(ctx, "s3://exists", o)
		if !errors.Is(err, bucket.ErrUnreachable) || !strings.Contains(err.Error(), "unreachable") {
			t.Fatalf("Open against a silent endpoint = %v, want ErrUnreachable", err)
		}
		if elapsed := time.Since(start); elapsed > 4*time.Second {
			t.Errorf("Open took %v, want it bounded by the 1s probe timeout", elapsed)
		}
		t.Log(err)
	})

	t.Run("MissingBucket", func(t *testing.T) {
		_, err := bucket.Open(ctx, "s3://no-such-bucket/p", m.S3Options())
		if !errors.Is(err, bucket.ErrNoSuchBucket) || !strings.Contains(err.Error(), `bucket "no-such-bucket" does not exist`) {
			t.Fatalf("Open(missing bucket) = %v, want ErrNoSuchBucket with a message naming it", err)
		}
		t.Log(err)
	})

	t.Run("WrongCredentials", func(t *testing.T) {
		for name, creds := range map[string][2]string{
			"secret": {m.AccessKey, m.SecretKey + "x"},
			"key":    {"nobody", m.SecretKey},
		} {
			o := m.S3Options()
			o.Credentials = credentials.NewStaticCredentialsProvider(creds[0], creds[1], "")
			_, err := bucket.Open(ctx, "s3://exists", o)
			if !errors.Is(err, bucket.ErrAccessDenied) || !strings.Contains(err.Error(), "access denied: check credentials") {
				t.Errorf("Open with a wrong %s = %v, want ErrAccessDenied", name, err)
			}
			t.Log(err)
		}
	})

	t.Run("NoCredentials", func(t *testing.T) {
		dir := t.TempDir()
		t.Setenv("AWS_ACCESS_KEY_ID", "")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "")
		t.Setenv("AWS_SESSION_TOKEN", "")
		t.Setenv("AWS_PROFILE", "")
		t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
		t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
		t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
		o := m.S3Options()
		o.Credentials = nil
		_, err := bucket.Open(ctx, "s3://exists", o)
		if !errors.Is(err, bucket.ErrAccessDenied) || !strings.Contains(err.Error(), "no credentials found") {
			t.Errorf("Open without credentials = %v, want ErrAccessDenied saying none were found", err)
		}
		t.Log(err)
	})

	t.Run("EnvCredentials", func(t *testing.T) {
		// The default chain, as featurefs mount uses it with MinIO.Env().
		dir := t.TempDir()
		for _, kv := range m.Env() {
			k, v, _ := strings.Cut(kv, "=")
			t.Setenv(k, v)
		}
		t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
		t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
		b, err := bucket.Open(ctx, "s3://exists", bucket.S3Options{Endpoint: m.Endpoint})
		if err != nil {
			t.Fatalf("Open with credentials from the environment: %v", err)
		}
		if _, err := b.List(ctx, "", ""); err != nil {
			t.Fatal(err)
		}
	})
}

// TestS3Restart checks that Gets fail (without hanging) while the server is
// down and work again once it is back.
func TestS3Restart(t *testing.T) {
	m := testenv.StartMinIO(t)
	m.CreateBucket(t, "restart")
	m.Put(t, "restart", "a.jpg", []byte("alpha"))
	o := m.S3Options()
	o.MaxRetries = 1
	o.Timeout = 2 * time.Second
	b, err := bucket.Open(context.Background(), "s3://restart", o)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m.Stop(t)
	if _, _, err := b.Get(ctx, "a.jpg", 100); err == nil || errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("Get while MinIO is down = %v, want a transport error", err)
	}
	m.Start(t)
	if data, _, err := b.Get(ctx, "a.jpg", 100); err != nil || string(data) != "alpha" {
		t.Fatalf("Get after restart = %q, %v", data, err)
	}
}

// fakeS3 is a minimal S3 endpoint: it answers the Open probe and serves GETs
// of one bucket through get.
type fakeS3 struct {
	srv  *httptest.Server
	gets atomic.Int64
	get  func(w http.ResponseWriter, r *http.Request, n int64)
}

func newFakeS3(t *testing.T, get func(w http.ResponseWriter, r *http.Request, n int64)) *fakeS3 {
	f := &fakeS3{get: get}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/bkt" && r.URL.Query().Get("list-type") == "2" {
			w.Header().Set("Content-Type", "application/xml")
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bkt</Name><Prefix></Prefix><KeyCount>0</KeyCount><MaxKeys>1</MaxKeys><IsTruncated>false</IsTruncated></ListBucketResult>`)
			return
		}
		if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/bkt/") {
			f.get(w, r, f.gets.Add(1))
			return
		}
		http.Error(w, "unexpected "+r.Method+" "+r.URL.String(), http.StatusBadRequest)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeS3) open(t *testing.T, o bucket.S3Options) bucket.Bucket {
	t.Helper()
	o.Endpoint = f.srv.URL
	o.Region = "us-east-1"
	o.Credentials = credentials.NewStaticCredentialsProvider("k", "s", "")
	b, err := bucket.Open(context.Background(), "s3://bkt", o)
	if err != nil {
		t.Fatalf("Open(fake): %v", err)
	}
	return b
}

func writeObject(w http.ResponseWriter, body string) {
	w.Header().Set("ETag", `"0123abcd"`)
	w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	fmt.Fprint(w, body)
}

// TestS3GetBound counts GETs in flight at a slow endpoint: never more than
// MaxConcurrentGets, and exactly that many when more Gets wait.
func TestS3GetBound(t *testing.T) {
	for _, limit := range []int{3, 16} {
		var inflight, peak atomic.Int64
		// Each GET waits until limit of them are in flight at once (or 10 s
		// pass), so that a loaded machine that starts the goroutines late
		// still reaches the bound; then it lasts 50 ms more, so that GETs
		// beyond a broken bound would overlap and raise the peak.
		reached := make(chan struct{})
		var once sync.Once
		f := newFakeS3(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
			n := inflight.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			if n >= int64(limit) {
				once.Do(func() { close(reached) })
			}
			select {
			case <-reached:
			case <-time.After(10 * time.Second):
			}
			time.Sleep(50 * time.Millisecond)
			inflight.Add(-1)
			writeObject(w, "data")
		})
		b := f.open(t, bucket.S3Options{MaxConcurrentGets: limit})
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if data, obj, err := b.Get(context.Background(), "k.jpg", 100); err != nil || string(data) != "data" || obj.ETag != "0123abcd" {
					t.Errorf("Get = %q %+v %v", data, obj, err)
				}
			}()
		}
		wg.Wait()
		if got := peak.Load(); got != int64(limit) {
			t.Errorf("MaxConcurrentGets %d: peak of %d GETs in flight, want exactly %d", limit, got, limit)
		}
	}
}

// TestS3GetContext checks that a Get ends with its context, both in flight
// and while waiting for a slot.
func TestS3GetContext(t *testing.T) {
	release := make(chan struct{})
	f := newFakeS3(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		select {
		case <-r.Context().Done():
		case <-release:
			writeObject(w, "late")
		}
	})
	defer close(release)
	b := f.open(t, bucket.S3Options{MaxConcurrentGets: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, _, err := b.Get(ctx, "slow.jpg", 100); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get in flight past its deadline = %v, want DeadlineExceeded", err)
	}

	// Occupy the only slot, then ask again.
	hold, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.Get(hold, "slow.jpg", 100); close(done) }()
	for f.gets.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if _, _, err := b.Get(ctx2, "other.jpg", 100); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get waiting for a slot = %v, want DeadlineExceeded", err)
	}
	if n := f.gets.Load(); n != 2 {
		t.Errorf("%d GETs reached the server, want 2 (the waiting Get must not send)", n)
	}
	stop()
	<-done
}

// TestS3Retries checks the retry policy: transient 500s are retried up to
// MaxRetries times.
func TestS3Retries(t *testing.T) {
	flaky := func(w http.ResponseWriter, r *http.Request, n int64) {
		if n <= 2 {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code><Message>try again</Message></Error>`)
			return
		}
		writeObject(w, "third time")
	}
	f := newFakeS3(t, flaky)
	b := f.open(t, bucket.S3Options{MaxRetries: 2})
	if data, _, err := b.Get(context.Background(), "k.jpg", 100); err != nil || string(data) != "third time" {
		t.Fatalf("Get with 2 retries over 2 failures = %q, %v", data, err)
	}
	if n := f.gets.Load(); n != 3 {
		t.Errorf("%d attempts, want 3", n)
	}

	f = newFakeS3(t, flaky)
	b = f.open(t, bucket.S3Options{MaxRetries: -1})
	if _, _, err := b.Get(context.Background(), "k.jpg", 100); err == nil || !strings.Contains(err.Error(), "k.jpg") {
		t.Fatalf("Get without retries = %v, want the 500 error naming the key", err)
	}
	if n := f.gets.Load(); n != 1 {
		t.Errorf("%d attempts without retries, want 1", n)
	}
}

// TestS3GetChunked checks the size limit on a body without Content-Length.
func TestS3GetChunked(t *testing.T) {
	body := strings.Repeat("x", 100)
	f := newFakeS3(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		w.Header().Set("ETag", `"e"`)
		fmt.Fprint(w, body[:50])
		w.(http.Flusher).Flush() // forces chunked encoding: no length known
		fmt.Fprint(w, body[50:])
	})
	b := f.open(t, bucket.S3Options{})
	if _, _, err := b.Get(context.Background(), "k.jpg", 99); !errors.Is(err, bucket.ErrTooLarge) {
		t.Errorf("chunked Get over the limit = %v, want ErrTooLarge", err)
	}
	if data, obj, err := b.Get(context.Background(), "k.jpg", 100); err != nil || string(data) != body || obj.Size != 100 {
		t.Errorf("chunked Get at the limit = %d bytes %+v %v", len(data), obj, err)
	}
}
