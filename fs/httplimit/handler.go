package httplimit

import (
	"errors"
	"io"
	"log"
	"net/http"
	"time"
)

// Timeouts bound how long a request may take to arrive and its answer to
// be taken.
type Timeouts struct {
	// Header bounds the arrival of a request's headers (and a TLS
	// handshake), from the connection's start or the end of the previous
	// request.
	Header time.Duration
	// Body bounds the arrival of a request's body, from the start of its
	// handler; a handler that does not read a body it was sent is not
	// waited for longer after it returns.
	Body time.Duration
	// Write bounds how long the client may take to accept each WriteChunk
	// bytes of an answer; past it the connection is closed and the
	// request's context cancelled.
	Write time.Duration
	// Idle bounds how long a kept-alive connection waits for its next
	// request.
	Idle time.Duration
}

// WriteChunk is the unit of answer bytes each Timeouts.Write applies to.
const WriteChunk = 256 << 10

// Handler applies t's Body and Write bounds to h's requests (Server applies
// Header and Idle).
func Handler(h http.Handler, t Timeouts) http.Handler {
	return &bounded{next: h, t: t}
}

type bounded struct {
	next http.Handler
	t    Timeouts
}

func (b *bounded) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		// Without a deadline, the server waits for the rest of an unread
		// body after the handler, for ever.
		rc.SetReadDeadline(time.Now().Add(b.t.Body))
		r.Body = &bodyDeadline{ReadCloser: r.Body, rc: rc}
	}
	// The answer's last bytes are flushed after the handler returns.
	defer func() { rc.SetWriteDeadline(time.Now().Add(b.t.Write)) }()
	b.next.ServeHTTP(&deadlineWriter{ResponseWriter: w, rc: rc, d: b.t.Write}, r)
}

// bodyDeadline lifts the body's read deadline once the body has been read
// to its end: the server then reads the connection in the background to
// notice a client going away, and a deadline would end the request.
type bodyDeadline struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *bodyDeadline) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.done {
		b.done = true
		b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// deadlineWriter writes in WriteChunk pieces, each under a fresh write
// deadline.
type deadlineWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), WriteChunk)
		w.rc.SetWriteDeadline(time.Now().Add(w.d))
		m, err := w.ResponseWriter.Write(p[:k])
		n += m
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

// FlushError flushes under a fresh write deadline (http.ResponseController
// calls it).
func (w *deadlineWriter) FlushError() error {
	w.rc.SetWriteDeadline(time.Now().Add(w.d))
	return w.rc.Flush()
}

// Flush is FlushError for http.Flusher.
func (w *deadlineWriter) Flush() { w.FlushError() }

// Unwrap returns the ResponseWriter written to (http.ResponseController).
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Server returns an http.Server for h on l with t's bounds: Header and
// Idle on the server, Body and Write through Handler, and l's
// ConnContext. errorLog may be nil.
func (l *Listener) Server(h http.Handler, t Timeouts, errorLog *log.Logger) *http.Server {
	return &http.Server{
		Handler:           Handler(h, t),
		ReadHeaderTimeout: t.Header,
		IdleTimeout:       t.Idle,
		MaxHeaderBytes:    64 << 10,
		ConnContext:       l.ConnContext,
		ErrorLog:          errorLog,
	}
}
