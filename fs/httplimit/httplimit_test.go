package httplimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// serve serves h on a bounded listener on 127.0.0.1 until the test ends.
func serve(t *testing.T, cfg Config, to Timeouts, h http.Handler) (*Listener, string) {
	t.Helper()
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := Wrap(nl, cfg)
	srv := ln.Server(h, to, nil)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln, nl.Addr().String()
}

// holdOpen opens a connection that sends request headers promising a
// body and never sends it.
func holdOpen(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
	return c
}

// closedWithin reports whether the server closes c within d (reading and
// dropping whatever it sends).
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// TestBodyThatNeverComesIsNotWaitedFor: headers promising a body that
// never comes: the connection is closed once Body has passed (without
// the bound: never), whether the handler reads the body or not.
func TestBodyThatNeverComesIsNotWaitedFor(t *testing.T) {
	for _, read := range []bool{false, true} {
		_, addr := serve(t, Config{MaxConns: 16, MaxConnsPerPeer: 16}, Timeouts{Header: 5 * time.Second, Body: 300 * time.Millisecond, Write: time.Second, Idle: time.Minute},
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if read {
					io.Copy(io.Discard, r.Body)
				}
				w.WriteHeader(http.StatusUnauthorized)
			}))
		c := holdOpen(t, addr)
		start := time.Now()
		if !closedWithin(c, 5*time.Second) {
			t.Errorf("handler reads the body %v: the connection is still open 5s after headers promising a body that never came", read)
		} else if took := time.Since(start); took > 3*time.Second {
			t.Errorf("handler reads the body %v: closed after %v, want about 300ms", read, took)
		}
		c.Close()
	}
}

// TestBodyDeadlineLiftedOnceRead: a request whose body has arrived runs
// past the body bound without its context being cancelled.
func TestBodyDeadlineLiftedOnceRead(t *testing.T) {
	errc := make(chan error, 1)
	_, addr := serve(t, Config{MaxConns: 16, MaxConnsPerPeer: 16}, Timeouts{Header: 5 * time.Second, Body: 200 * time.Millisecond, Write: time.Second, Idle: time.Minute},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			select {
			case <-time.After(time.Second):
				errc <- nil
			case <-r.Context().Done():
				errc <- r.Context().Err()
			}
			io.WriteString(w, "ok")
		}))
	resp, err := http.Post("http://"+addr+"/x", "text/plain", strings.NewReader("0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := <-errc; err != nil || string(b) != "ok" {
		t.Errorf("handler running 1s past a 200ms body bound: context %v, answer %q; want neither cancelled nor cut", err, b)
	}
}

// TestClientThatStopsReadingIsDisconnected: a client that reads nothing
// of a large answer: the handler's write fails within about Write and its
// request's context is cancelled.
func TestClientThatStopsReadingIsDisconnected(t *testing.T) {
	type result struct {
		written  int64
		err      error
		ctxErr   error
		tookSecs float64
	}
	done := make(chan result, 1)
	_, addr := serve(t, Config{MaxConns: 16, MaxConnsPerPeer: 16}, Timeouts{Header: 5 * time.Second, Body: time.Second, Write: 500 * time.Millisecond, Idle: time.Minute},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			buf := make([]byte, 1<<20)
			var n int64
			var err error
			for n < 1<<30 && err == nil { // 1 GiB: far more than socket buffers hold
				var k int
				k, err = w.Write(buf)
				n += int64(k)
			}
			done <- result{n, err, r.Context().Err(), time.Since(start).Seconds()}
		}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case res := <-done:
		if res.err == nil || res.ctxErr == nil {
			t.Errorf("client not reading: wrote %d bytes, error %v, context %v; want a write error and a cancelled context", res.written, res.err, res.ctxErr)
		}
		t.Logf("client not reading: %d bytes written in %.1fs, then %v", res.written, res.tookSecs, res.err)
	case <-time.After(20 * time.Second):
		t.Fatal("a client that reads nothing still held the handler 20s later (write bound 500ms)")
	}
}

// TestConnectionBounds: a peer holds at most MaxConnsPerPeer connections
// and the listener at most MaxConns; a flood of connections that never
// send a request churns among themselves, while a request admitted as
// authorized keeps its connection and a new authorized client gets in.
func TestConnectionBounds(t *testing.T) {
	release := make(chan struct{})
	admitted := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Auth") != "yes" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		defer Admit(r)()
		if r.URL.Path == "/hold" {
			admitted <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok")
	})
	for _, tc := range []struct {
		name           string
		maxConns, peer int
		want           int
	}{{"per peer", 64, 8, 8}, {"total", 8, 64, 8}} {
		t.Run(tc.name, func(t *testing.T) {
			ln, addr := serve(t, Config{MaxConns: tc.maxConns, MaxConnsPerPeer: tc.peer}, Timeouts{Header: 10 * time.Second, Body: 10 * time.Second, Write: 10 * time.Second, Idle: time.Minute}, h)
			// An authorized request in progress.
			held := make(chan error, 1)
			go func() {
				req, _ := http.NewRequest("GET", "http://"+addr+"/hold", nil)
				req.Header.Set("X-Auth", "yes")
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					_, err = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				held <- err
			}()
			<-admitted
			var conns []net.Conn
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			for range 200 {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, c)
				if open := ln.Stats().Open; open > tc.want {
					t.Fatalf("%d connections held, bound %d", open, tc.want)
				}
			}
			// A new authorized client gets in at once, while the flood
			// is held.
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			for i := range 5 {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/quick", nil)
				req.Header.Set("X-Auth", "yes")
				resp, err := tr.RoundTrip(req)
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if string(b) != "ok" {
						err = fmt.Errorf("answer %q", b)
					}
				}
				cancel()
				if err != nil {
					t.Errorf("authorized request %d during the flood: %v", i, err)
				}
				c, _ := net.Dial("tcp", addr) // more flood in between
				conns = append(conns, c)
			}
			close(release)
			if err := <-held; err != nil {
				t.Errorf("the authorized request in progress during the flood: %v (its connection was closed)", err)
			}
			st := ln.Stats()
			if st.Evicted == 0 || st.Open > tc.want {
				t.Errorf("stats %+v: want evictions and at most %d open", st, tc.want)
			}
			release = make(chan struct{})
		})
	}
}

// TestPeerOf: IPv4 addresses count alone, IPv6 ones by /64.
func TestPeerOf(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:5":           "127.0.0.1",
		"[2001:db8:1:2::7]:80":  "2001:db8:1:2::/64",
		"[2001:db8:1:2:ff::]:1": "2001:db8:1:2::/64",
		"[::ffff:10.0.0.1]:9":   "10.0.0.1",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := peerOf(a); got != want {
			t.Errorf("peerOf(%s) = %s, want %s", addr, got, want)
		}
	}
}

// TestAdmitOverTLS: a request over TLS is found by Admit (ConnContext
// looks under the TLS connection): an authorized request in progress keeps
// its connection through a flood.
func TestAdmitOverTLS(t *testing.T) {
	release := make(chan struct{})
	admitted := make(chan struct{})
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := Wrap(nl, Config{MaxConns: 16, MaxConnsPerPeer: 4})
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer Admit(r)()
		close(admitted)
		<-release
		io.WriteString(w, "ok")
	}))
	ts.Listener.Close()
	ts.Listener = ln
	ts.Config.ConnContext = ln.ConnContext
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the flood's handshakes
	ts.StartTLS()
	defer ts.Close()
	held := make(chan error, 1)
	go func() {
		resp, err := ts.Client().Get(ts.URL)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		held <- err
	}()
	<-admitted
	for range 50 {
		c, err := net.Dial("tcp", nl.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	close(release)
	if err := <-held; err != nil {
		t.Errorf("authorized TLS request during a flood: %v (its connection was closed)", err)
	}
	if st := ln.Stats(); st.Evicted == 0 {
		t.Errorf("stats %+v: the flood evicted nothing", st)
	}
}
