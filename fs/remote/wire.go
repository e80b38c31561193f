package remote

// The client's side of the wire: authenticated HTTP requests, the framed
// batch stream, and answers turned into errors (a featurefs JSON error
// through ErrorOf, anything else as a foreignAnswerError).

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/featurefs/featurefs/cache/codec"
	"github.com/featurefs/featurefs/extractor/api"
)

// TokenEnv is the environment variable a token is read from when no token
// file is given.
const TokenEnv = "FEATUREFS_TOKEN"

// LoadToken returns the bearer token: the content of file (whitespace
// trimmed) when file is given, else $FEATUREFS_TOKEN. An empty token file is
// an error; no file and no variable is "".
func LoadToken(file string) (string, error) {
	if file == "" {
		return strings.TrimSpace(os.Getenv(TokenEnv)), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", file)
	}
	return tok, nil
}

// TLSConfig returns a client TLS configuration trusting the system roots
// and, when caFile is given, the PEM certificates in it.
func TLSConfig(caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s: no PEM certificate in it", caFile)
	}
	cfg.RootCAs = pool
	return cfg, nil
}

// get does an authenticated GET of path on server u and decodes the JSON
// answer into v, failing after Timeout; at most maxModelsBody bytes of it
// for /v1/models, maxJSONBody for the others.
func (c *Client) get(ctx context.Context, u, path string, q url.Values, v any) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	target := u + path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", u, err)
	}
	c.authorize(req)
	c.n.httpRequests.Add(1)
	resp, err := c.http.Do(req)
	if err != nil {
		return c.unavailable(u, err)
	}
	defer resp.Body.Close()
	if path != "/v1/models" {
		c.sawVersion(u, resp.Header.Get(ModelsVersionHeader))
	}
	if resp.StatusCode != http.StatusOK {
		return responseError(resp, u, q.Get("key")+q.Get("prefix"))
	}
	if ct := mediaType(resp); ct != "application/json" {
		return &foreignAnswerError{server: u, status: resp.StatusCode, contentType: ct}
	}
	limit := int64(maxJSONBody)
	if path == "/v1/models" {
		limit = maxModelsBody
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, limit)).Decode(v); err != nil {
		return c.unavailable(u, fmt.Errorf("reading %s: %w", path, err))
	}
	return nil
}

func (c *Client) authorize(req *http.Request) {
	if c.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	}
}

// timeoutError is a server silent for the client's Timeout: it matches
// ErrUnavailable, and it is a timeout (Timeout, as net.Error's) to whoever
// classifies errors (the mount counts it as one, not as "other").
type timeoutError struct{ msg string }

func (e *timeoutError) Error() string { return e.msg }
func (e *timeoutError) Unwrap() error { return ErrUnavailable }

// Timeout reports that the server did not answer in time.
func (e *timeoutError) Timeout() bool { return true }

// noAnswer is the error for what (e.g. "URL: no answer within") after d.
func noAnswer(what string, d time.Duration) error {
	return &timeoutError{msg: fmt.Sprintf("%s %v: %v", what, d, ErrUnavailable)}
}

// unavailable wraps a transport error as ErrUnavailable.
func (c *Client) unavailable(u string, err error) error {
	c.n.unavailable.Add(1)
	if errors.Is(err, context.DeadlineExceeded) {
		return noAnswer(u+": no answer within", c.cfg.Timeout)
	}
	return fmt.Errorf("%s: %w: %w", u, ErrUnavailable, err)
}

// ErrNotFeatureServer is matched by Dial's error when a server answers, but
// not as featurefs serve does: an HTML page, an S3 XML error, JSON of
// another shape. The --remote URL is most likely wrong.
var ErrNotFeatureServer = errors.New("not a featurefs server")

// foreignAnswerError is an answer whose body is not featurefs's JSON (a
// proxy's or another server's page). Its message is one line with the
// status and the body's type, never the body: a whole HTML page or XML
// document has no place in an error line. A 502, 503 or 504 matches
// ErrUnavailable (a proxy whose featurefs server is away).
type foreignAnswerError struct {
	server      string
	status      int
	contentType string
}

func (e *foreignAnswerError) Error() string {
	return fmt.Sprintf("%s: HTTP %d, %s, not a featurefs answer", e.server, e.status, e.contentType)
}

func (e *foreignAnswerError) Unwrap() error {
	switch e.status {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return ErrUnavailable
	}
	return nil
}

// mediaType is an answer's Content-Type without parameters, "untyped" when
// there is none.
func mediaType(resp *http.Response) string {
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		return "untyped"
	}
	if mt, _, err := mime.ParseMediaType(ct); err == nil {
		return mt
	}
	return ct
}

// responseError turns a non-200 answer into an error: featurefs's JSON
// error through ErrorOf, anything else as a foreignAnswerError.
func responseError(resp *http.Response, u, key string) error {
	var e ErrorResponse
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(b, &e) != nil || e.Error == "" {
		return &foreignAnswerError{server: strings.TrimRight(u, "/"), status: resp.StatusCode, contentType: mediaType(resp)}
	}
	return ErrorOf(resp.StatusCode, e.Error, u, key)
}

// fetchModels asks server u for its models (GET /v1/models). A server that
// answers, but not as featurefs serve does, fails with one line matching
// ErrNotFeatureServer.
func (c *Client) fetchModels(ctx context.Context, u string) (ModelsResponse, error) {
	var info ModelsResponse
	err := c.get(ctx, u, "/v1/models", nil, &info)
	var fa *foreignAnswerError
	switch {
	case errors.As(err, &fa) && !errors.Is(err, ErrUnavailable):
		return info, fmt.Errorf("remote: the server at %s is %w (GET /v1/models answered HTTP %d, %s): check the --remote URL",
			u, ErrNotFeatureServer, fa.status, fa.contentType)
	case err == nil && info.Protocol == 0:
		return info, fmt.Errorf("remote: the server at %s is %w (GET /v1/models answered HTTP 200, JSON without a featurefs protocol version): check the --remote URL",
			u, ErrNotFeatureServer)
	}
	return info, err
}

// postBatch makes one POST /v1/batch of items to server u and calls answer
// with each item's index, result and the bytes it took on the wire as its
// frame comes (completion order;
// a per-item error keeps its kind through ErrorOf). A watchdog cancels the
// request when the server stays silent (no response, frame or heartbeat)
// for Timeout. The error returned is for every item not answered: a
// refused batch (the server's error), or a broken stream (ErrUnavailable
// when the server went silent or away, or the client was closed;
// ErrBadAnswer when its frames break the protocol or the client's caps:
// readBatch).
func (c *Client) postBatch(u string, items []BatchItem, answer func(i int, data []byte, wire int, err error)) error {
	body, err := json.Marshal(BatchRequest{Items: items, Encodings: []string{EncodingFFZ1}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(c.owner.Context()) // Close cancels it
	defer cancel()
	var silent atomic.Bool
	watchdog := time.AfterFunc(c.cfg.Timeout, func() {
		silent.Store(true)
		cancel()
	})
	defer watchdog.Stop()
	broken := func(err error) error {
		if silent.Load() {
			err = noAnswer("no answer for", c.cfg.Timeout)
		}
		c.n.unavailable.Add(1)
		return fmt.Errorf("%s: %w", u, err)
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u+"/v1/batch", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	c.authorize(req)
	c.n.httpRequests.Add(1)
	c.n.batches.Add(1)
	c.n.batchedItems.Add(int64(len(items)))
	resp, err := c.http.Do(req)
	if err != nil {
		return broken(fmt.Errorf("%w: %w", ErrUnavailable, err))
	}
	defer resp.Body.Close()
	watchdog.Reset(c.cfg.Timeout)
	c.sawVersion(u, resp.Header.Get(ModelsVersionHeader))
	if resp.StatusCode != http.StatusOK {
		return responseError(resp, u, "batch")
	}
	n, err := readStreamHeader(resp.Body)
	if err != nil {
		return broken(fmt.Errorf("%w: %w", ErrUnavailable, err))
	}
	if n != len(items) {
		return broken(fmt.Errorf("%w: batch stream announces %d items, %d were asked for", ErrBadAnswer, n, len(items)))
	}
	return c.readBatch(resp.Body, u, items, answer, func() { watchdog.Reset(c.cfg.Timeout) }, broken)
}

// ErrBadAnswer is matched by the errors of a server's answer that breaks
// the protocol or the client's caps (limits.go): a frame longer than its
// item's feature can be, data of the wrong length or header, a frame for
// no item. Readers of the items get EIO.
var ErrBadAnswer = errors.New("malformed answer from the feature server")

// readBatch reads the frames of a batch stream after its header, calling
// answer for each item's frame and alive after each frame (heartbeats
// too). A frame's lengths are checked before anything is allocated for it
// (frameLimit: its item's .npy size, known from the model's shape); an OK
// frame whose data is then not its item's feature fails that item only
// (ErrBadAnswer); a frame past its limit, or for no item, ends the stream
// with an error (through broken) for the items not yet answered.
func (c *Client) readBatch(r io.Reader, u string, items []BatchItem, answer func(i int, data []byte, wire int, err error), alive func(), broken func(error) error) error {
	done := make([]bool, len(items))
	for left := len(items); left > 0; {
		h, err := readFrameHeader(r)
		if err != nil {
			if errors.Is(err, ErrBadAnswer) {
				return broken(err)
			}
			return broken(fmt.Errorf("%w: %w", ErrUnavailable, noEOF(err)))
		}
		var limit uint64
		switch {
		case h.Index == HeartbeatIndex:
		case int64(h.Index) >= int64(len(items)) || done[h.Index]:
			return broken(fmt.Errorf("%w: batch stream: unexpected frame for item %d", ErrBadAnswer, h.Index))
		case h.Status == StatusOK:
			limit = c.frameLimit(items[h.Index], h.Flags)
		}
		if h.DataLen > limit {
			return broken(fmt.Errorf("%w: batch stream: frame of item %d (status %d) declares %d data bytes, at most %d",
				ErrBadAnswer, int64(h.Index), h.Status, h.DataLen, limit))
		}
		f, err := readFrameBody(r, h)
		if err != nil {
			return broken(fmt.Errorf("%w: %w", ErrUnavailable, noEOF(err)))
		}
		alive()
		if f.Index == HeartbeatIndex {
			continue
		}
		done[f.Index] = true
		left--
		it := items[f.Index]
		if f.Status == StatusOK {
			data, err := c.frameData(f, it)
			if err != nil {
				err = fmt.Errorf("%s: item %q: %w", u, it.Key, err)
			}
			answer(int(f.Index), data, len(f.Data), err)
		} else {
			answer(int(f.Index), nil, 0, ErrorOf(int(f.Status), f.Message, u, it.Key))
		}
	}
	return nil
}

// npySize is the .npy size of an item's feature (0: an item of no model
// or layer the client knows; Extract sends none).
func (c *Client) npySize(it BatchItem) int64 {
	sizes := c.npySizes[it.Model]
	if it.Layer < 0 || it.Layer >= len(sizes) {
		return 0
	}
	return sizes[it.Layer]
}

// frameLimit is the most data an OK frame of item it may carry: its .npy
// size, or the largest blob of that many bytes when compressed.
func (c *Client) frameLimit(it BatchItem, flags uint16) uint64 {
	n := c.npySize(it)
	if flags&FrameCompressed != 0 && n > 0 {
		return uint64(codec.MaxLen(int(n)))
	}
	return uint64(n)
}

// frameData returns the .npy bytes of an OK frame of item it: its data, or
// the data decompressed (FrameCompressed), which must be exactly the
// item's .npy file (its size and header from the model's shape), else an
// error matching ErrBadAnswer.
func (c *Client) frameData(f Frame, it BatchItem) ([]byte, error) {
	c.n.wireBytes.Add(int64(len(f.Data)))
	want := c.npySize(it)
	if want <= 0 {
		return nil, fmt.Errorf("%w: a feature of model %q layer %d, which the servers do not list", ErrBadAnswer, it.Model, it.Layer)
	}
	data := f.Data
	if f.Flags&FrameCompressed != 0 {
		n, err := codec.RawLen(f.Data)
		if err != nil {
			return nil, fmt.Errorf("%w: compressed feature: %w", ErrBadAnswer, err)
		}
		if int64(n) != want {
			return nil, fmt.Errorf("%w: compressed feature of %d bytes, its layer's shape gives %d", ErrBadAnswer, n, want)
		}
		t0 := time.Now()
		data, err = codec.Decode(make([]byte, 0, n), f.Data)
		c.n.decompressNanos.Add(int64(time.Since(t0)))
		if err != nil {
			return nil, fmt.Errorf("%w: compressed feature: %w", ErrBadAnswer, err)
		}
	}
	if int64(len(data)) != want {
		return nil, fmt.Errorf("%w: feature of %d bytes, its layer's shape gives %d", ErrBadAnswer, len(data), want)
	}
	if m := c.set.Load().byName[it.Model]; m == nil || !bytes.HasPrefix(data, api.NPYHeader(m.Layers[it.Layer].Shape, c.info.DType)) {
		return nil, fmt.Errorf("%w: feature's .npy header is not its layer's", ErrBadAnswer)
	}
	c.n.rawBytes.Add(int64(len(data)))
	return data, nil
}

// openWatched starts an authenticated GET of u+path whose body is read
// through a watchdog: the request is cancelled when the server sends
// nothing for the client's Timeout. done must be called with the error of
// reading the body; it returns that error, or ErrUnavailable naming the
// silence, and releases the request.
func (c *Client) openWatched(ctx context.Context, u, path, what string) (io.Reader, func(error) error, error) {
	ctx, cancel := context.WithCancel(ctx)
	var silent atomic.Bool
	watchdog := time.AfterFunc(c.cfg.Timeout, func() {
		silent.Store(true)
		cancel()
	})
	fail := func(err error) error {
		watchdog.Stop()
		cancel()
		if silent.Load() {
			c.n.unavailable.Add(1)
			return noAnswer(u+": no answer for", c.cfg.Timeout)
		}
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+path, nil)
	if err != nil {
		return nil, nil, fail(err)
	}
	c.authorize(req)
	c.n.httpRequests.Add(1)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, fail(c.unavailable(u, err))
	}
	watchdog.Reset(c.cfg.Timeout)
	if resp.StatusCode != http.StatusOK {
		err := responseError(resp, u, what)
		resp.Body.Close()
		return nil, nil, fail(err)
	}
	r := &watchedReader{r: resp.Body, t: watchdog, d: c.cfg.Timeout}
	return r, func(err error) error {
		resp.Body.Close()
		if err != nil {
			if !silent.Load() {
				err = c.unavailable(u, fmt.Errorf("reading %s: %w", what, err))
			}
			return fail(err)
		}
		fail(nil)
		return nil
	}, nil
}

// watchedReader resets a watchdog timer whenever it reads something.
type watchedReader struct {
	r io.Reader
	t *time.Timer
	d time.Duration
}

func (w *watchedReader) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if n > 0 {
		w.t.Reset(w.d)
	}
	return n, err
}
