package remote

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/internal/lru"
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

// ClientConfig is what Dial needs. URLs is required.
type ClientConfig struct {
	// URLs are the feature servers, http:// or https://HOST:PORT.
	URLs []string
	// Token is the bearer token sent with every request.
	Token string
	// TLS is the client TLS configuration for https:// servers (nil: the
	// system roots).
	TLS *tls.Config
	// Timeout is how long a server may stay silent (no response, frame or
	// heartbeat) before the requests waiting on it fail (default 30s).
	Timeout time.Duration
	// MaxBatch is the most items in one batch request (default 64).
	MaxBatch int
	// MaxWait is how long a batch waits to fill (default 2ms).
	MaxWait time.Duration
	// MaxInFlight is the most batch requests in flight per server
	// (default 4).
	MaxInFlight int
	// MaxPending bounds the items queued per server (default 4096);
	// Extract waits for room beyond it.
	MaxPending int
	// StaleEntries bounds the listing entries kept to answer while no
	// server does (default 1<<20).
	StaleEntries int
	// Logger receives the client's logs; nil discards.
	Logger *slog.Logger
	// Transport overrides the HTTP transport (tests).
	Transport http.RoundTripper
}

// Client talks to a set of feature servers: it routes each object key to
// one of them by rendezvous hashing, gathers concurrent feature requests
// into batches, and offers the servers' source as a bucket.Bucket (Bucket)
// and their models as an fs.Extractor (Extractor).
type Client struct {
	// Constant after Dial.
	cfg      ClientConfig
	log      *slog.Logger
	http     *http.Client
	servers  []*server // sorted by URL
	info     ModelsResponse
	models   []*extractor.Model
	byName   map[string]*extractor.Model
	identity string
	maxData  int64
	stop     chan struct{}
	stopOnce sync.Once

	stale *lru.LRU[string, any] // listing pages and stats, for when no server answers

	n clientCounters
}

// clientCounters are the client's figures.
type clientCounters struct {
	requests, completed, failed, badImages atomic.Int64
	batches, batchedItems, httpRequests    atomic.Int64
	staleAnswers, unavailable              atomic.Int64
	inFlight                               atomic.Int64
}

// server is one feature server and its batching queues: readers'
// requests (fg) go out before prefetch's (bg).
type server struct {
	url    string
	c      *Client
	fg, bg chan *call
	slots  chan struct{}
}

// call is one feature request waiting for its batch.
type call struct {
	item BatchItem
	ctx  context.Context
	done chan struct{}
	data []byte
	err  error
}

// Dial checks the servers (GET /v1/models on each; they must agree on the
// source, dtype and models) and starts the batching queues. At least one
// server must answer; those that do not are used once they do.
func Dial(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if len(cfg.URLs) == 0 {
		return nil, errors.New("remote: no server URL")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 64
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 2 * time.Millisecond
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 4
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 4096
	}
	if cfg.StaleEntries <= 0 {
		cfg.StaleEntries = 1 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	urls, err := normalizeURLs(cfg.URLs)
	if err != nil {
		return nil, err
	}
	cfg.URLs = urls
	tr := cfg.Transport
	if tr == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = cfg.TLS
		t.MaxIdleConnsPerHost = 2 * cfg.MaxInFlight
		t.ResponseHeaderTimeout = cfg.Timeout
		t.DialContext = (&net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}).DialContext
		t.TLSHandshakeTimeout = cfg.Timeout
		tr = t
	}
	c := &Client{
		cfg:   cfg,
		log:   cfg.Logger,
		http:  &http.Client{Transport: tr},
		stop:  make(chan struct{}),
		stale: lru.New[string, any](cfg.StaleEntries),
	}
	for _, u := range urls {
		c.servers = append(c.servers, &server{url: u, c: c, fg: make(chan *call, cfg.MaxPending), bg: make(chan *call, cfg.MaxPending),
			slots: make(chan struct{}, cfg.MaxInFlight)})
	}

	// Ask every server for its models.
	infos := make([]ModelsResponse, len(c.servers))
	errs := make([]error, len(c.servers))
	var wg sync.WaitGroup
	for i, s := range c.servers {
		wg.Go(func() { infos[i], errs[i] = c.fetchModels(ctx, s.url) })
	}
	wg.Wait()
	var first = -1
	var down []error
	for i, err := range errs {
		switch {
		case err == nil && first < 0:
			first = i
		case err == nil:
			if why := agree(infos[first], infos[i]); why != "" {
				return nil, fmt.Errorf("remote: %s and %s disagree: %s; all servers must serve the same source and models", urls[first], urls[i], why)
			}
		case errors.Is(err, ErrUnauthorized), !errors.Is(err, ErrUnavailable):
			return nil, err
		default:
			down = append(down, err)
		}
	}
	if first < 0 {
		return nil, fmt.Errorf("remote: no server answers: %w", errors.Join(down...))
	}
	for _, err := range down {
		c.log.Warn("featurefs: feature server does not answer; routing to it anyway", slog.Any("err", err))
	}
	c.info = infos[first]
	if c.info.Protocol != ProtocolVersion {
		return nil, fmt.Errorf("remote: %s speaks protocol %d, this featurefs %d", urls[first], c.info.Protocol, ProtocolVersion)
	}
	if err := c.buildModels(); err != nil {
		return nil, err
	}
	if c.info.Limits.MaxBatchItems > 0 && c.cfg.MaxBatch > c.info.Limits.MaxBatchItems {
		c.cfg.MaxBatch = c.info.Limits.MaxBatchItems
	}
	c.identity = "featurefs+" + strings.Join(urls, ",") + "|" + c.info.Source
	for _, s := range c.servers {
		go s.loop()
	}
	return c, nil
}

// normalizeURLs checks and sorts the server URLs, trailing slashes removed.
func normalizeURLs(in []string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, raw := range in {
		raw = strings.TrimRight(strings.TrimSpace(raw), "/")
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return nil, fmt.Errorf("remote: server URL %q: want http://HOST:PORT or https://HOST:PORT", raw)
		}
		if !seen[raw] {
			seen[raw] = true
			out = append(out, raw)
		}
	}
	sort.Strings(out)
	return out, nil
}

// agree returns why two servers' answers differ, or "".
func agree(a, b ModelsResponse) string {
	switch {
	case a.Source != b.Source:
		return fmt.Sprintf("source %s vs %s", a.Source, b.Source)
	case a.DType != b.DType:
		return fmt.Sprintf("dtype %s vs %s", a.DType, b.DType)
	case len(a.Models) != len(b.Models):
		return fmt.Sprintf("%d vs %d models", len(a.Models), len(b.Models))
	}
	for i := range a.Models {
		if a.Models[i].Name != b.Models[i].Name || a.Models[i].Digest != b.Models[i].Digest || a.Models[i].PreprocessKey != b.Models[i].PreprocessKey {
			return fmt.Sprintf("model %s (%.12s) vs %s (%.12s)", a.Models[i].Name, a.Models[i].Digest, b.Models[i].Name, b.Models[i].Digest)
		}
	}
	return ""
}

// buildModels turns the servers' model list into extractor.Models.
func (c *Client) buildModels() error {
	c.byName = map[string]*extractor.Model{}
	for _, mi := range c.info.Models {
		m := &extractor.Model{Name: mi.Name, Path: c.servers[0].url + "/v1/models#" + mi.Name, Digest: mi.Digest, Aliases: mi.Aliases, Preprocess: mi.Preprocess}
		if m.Preprocess.Key() != mi.PreprocessKey {
			return fmt.Errorf("remote: model %s: preprocessing %q does not round-trip (%q)", mi.Name, mi.PreprocessKey, m.Preprocess.Key())
		}
		for i, l := range mi.Layers {
			if l.Index != i {
				return fmt.Errorf("remote: model %s: layer %d listed as %d", mi.Name, i, l.Index)
			}
			m.Layers = append(m.Layers, extractor.Layer{Index: l.Index, Name: l.Name, Tensor: l.Tensor, Shape: l.Shape, Bytes: l.Bytes, CumGFLOPs: l.CumGFLOPs})
			if n := extractor.NPYSize(l.Shape, c.info.DType); n > c.maxData {
				c.maxData = n
			}
		}
		c.models = append(c.models, m)
		c.byName[m.Name] = m
	}
	if len(c.models) == 0 {
		return errors.New("remote: the servers serve no model")
	}
	return nil
}

// Close stops the batching queues; calls waiting in them fail.
func (c *Client) Close() error {
	c.stopOnce.Do(func() { close(c.stop) })
	c.http.CloseIdleConnections()
	return nil
}

// Info returns the servers' GET /v1/models answer.
func (c *Client) Info() ModelsResponse { return c.info }

// URLs returns the servers, sorted.
func (c *Client) URLs() []string { return append([]string(nil), c.cfg.URLs...) }

// Route returns the server that key is routed to.
func (c *Client) Route(key string) string { return c.servers[Rank(c.cfg.URLs, key)[0]].url }

// Rank orders servers for key by rendezvous (highest random weight)
// hashing: the indexes of urls by decreasing score(url, key), ties by URL.
// Removing a server moves only the keys that ranked it first.
func Rank(urls []string, key string) []int {
	idx := make([]int, len(urls))
	score := make([]uint64, len(urls))
	for i, u := range urls {
		idx[i] = i
		score[i] = hrwScore(u, key)
	}
	sort.Slice(idx, func(a, b int) bool {
		i, j := idx[a], idx[b]
		if score[i] != score[j] {
			return score[i] > score[j]
		}
		return urls[i] < urls[j]
	})
	return idx
}

// hrwScore is splitmix64's finalizer over FNV-1a-64(url "\x00" key).
func hrwScore(u, key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(u))
	h.Write([]byte{0})
	h.Write([]byte(key))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// get does an authenticated GET of path on server u and decodes the JSON
// answer into v, failing after Timeout.
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
	if resp.StatusCode != http.StatusOK {
		return responseError(resp, u, q.Get("key")+q.Get("prefix"))
	}
	if ct := mediaType(resp); ct != "application/json" {
		return &foreignAnswerError{server: u, status: resp.StatusCode, contentType: ct}
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(v); err != nil {
		return c.unavailable(u, fmt.Errorf("reading %s: %w", path, err))
	}
	return nil
}

func (c *Client) authorize(req *http.Request) {
	if c.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	}
}

// unavailable wraps a transport error as ErrUnavailable.
func (c *Client) unavailable(u string, err error) error {
	c.n.unavailable.Add(1)
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: no answer within %v: %w", u, c.cfg.Timeout, ErrUnavailable)
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

// failover reports whether an error from one server means the next one
// should be tried: it did not answer, or answered that it could not.
func failover(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrServerTimeout)
}

// Bucket returns the servers' source as a read-only bucket: List and Stat
// go to the servers (routed by prefix or key, falling over in rank order);
// Get is not supported (features are computed on the servers).
func (c *Client) Bucket() *Bucket { return &Bucket{c: c} }

// Extractor returns the servers' models as an fs.Extractor whose Extract
// fetches features from the servers in batches.
func (c *Client) Extractor() *Extractor { return &Extractor{c: c} }

// Bucket is the servers' source seen through GET /v1/list and /v1/stat.
type Bucket struct{ c *Client }

var _ bucket.Bucket = (*Bucket)(nil)

// List returns one page of a one-level listing. When no server answers, the
// last page seen for the same prefix and token is returned, if any.
func (b *Bucket) List(ctx context.Context, prefix, token string) (bucket.Page, error) {
	c := b.c
	staleKey := "l\x00" + prefix + "\x00" + token
	q := url.Values{"prefix": {prefix}}
	if token != "" {
		q.Set("continuation", token)
	}
	var lastErr error
	for _, i := range Rank(c.cfg.URLs, prefix) {
		var resp ListResponse
		err := c.get(ctx, c.servers[i].url, "/v1/list", q, &resp)
		if err == nil {
			p := bucket.Page{Prefixes: resp.Prefixes, Next: resp.Next}
			for _, o := range resp.Objects {
				p.Objects = append(p.Objects, o.object())
			}
			c.stale.Put(staleKey, p, len(p.Objects)+len(p.Prefixes)+1)
			return p, nil
		}
		if !failover(err) || ctx.Err() != nil {
			return bucket.Page{}, fmt.Errorf("list %q: %w", prefix, err)
		}
		lastErr = err
	}
	if v, ok := c.stale.Get(staleKey); ok {
		c.n.staleAnswers.Add(1)
		c.log.Warn("featurefs: no feature server answers; serving the last listing seen", slog.String("key", prefix), slog.Any("err", lastErr))
		return v.(bucket.Page), nil
	}
	return bucket.Page{}, fmt.Errorf("list %q: %w", prefix, lastErr)
}

// Stat returns an object's metadata. When no server answers, the last
// answer for the key is returned, if any.
func (b *Bucket) Stat(ctx context.Context, key string) (bucket.Object, error) {
	c := b.c
	staleKey := "s\x00" + key
	var lastErr error
	for _, i := range Rank(c.cfg.URLs, key) {
		var o ObjectInfo
		err := c.get(ctx, c.servers[i].url, "/v1/stat", url.Values{"key": {key}}, &o)
		if err == nil {
			c.stale.Put(staleKey, o.object(), 1)
			return o.object(), nil
		}
		if !failover(err) || ctx.Err() != nil {
			return bucket.Object{}, fmt.Errorf("stat %q: %w", key, err)
		}
		lastErr = err
	}
	if v, ok := c.stale.Get(staleKey); ok {
		c.n.staleAnswers.Add(1)
		return v.(bucket.Object), nil
	}
	return bucket.Object{}, fmt.Errorf("stat %q: %w", key, lastErr)
}

// ErrNoGet is matched by Bucket.Get: a remote source's objects are not
// fetched by the mount.
var ErrNoGet = fmt.Errorf("remote bucket: objects are read on the feature servers: %w", errors.ErrUnsupported)

// Get is not supported: it returns an error matching ErrNoGet.
func (b *Bucket) Get(ctx context.Context, key string, maxBytes int64) ([]byte, bucket.Object, error) {
	return nil, bucket.Object{}, ErrNoGet
}

// Identity is "featurefs+<sorted URLs joined by ','>|<the servers' source
// identity>".
func (b *Bucket) Identity() string { return b.c.identity }

// Extractor is the servers' models; Extract asks the server the object is
// routed to, gathering concurrent requests into batches.
type Extractor struct{ c *Client }

// Models returns the servers' models, in their order.
func (e *Extractor) Models() []*extractor.Model {
	return append([]*extractor.Model(nil), e.c.models...)
}

// Model returns the model called name.
func (e *Extractor) Model(name string) (*extractor.Model, bool) {
	m, ok := e.c.byName[name]
	return m, ok
}

// LayerTable returns the server's layers table of a model (the text of
// features/<model>/layers), which fs shows instead of Model.Table.
func (e *Extractor) LayerTable(model string) (string, bool) {
	for _, mi := range e.c.info.Models {
		if mi.Name == model {
			return mi.Table, true
		}
	}
	return "", false
}

// DType is the servers' element type.
func (e *Extractor) DType() extractor.DType { return e.c.info.DType }

// Device names the servers: "remote:" and the URLs.
func (e *Extractor) Device() string { return "remote:" + strings.Join(e.c.cfg.URLs, ",") }

// Stats returns the client's figures in the extractor's form: requests,
// completed, failed, bad images, batches (HTTP batch requests) and batched
// items.
func (e *Extractor) Stats() extractor.Stats {
	n := &e.c.n
	return extractor.Stats{
		Device: e.Device(), Requests: n.requests.Load(), Completed: n.completed.Load(), Failed: n.failed.Load(),
		BadImages: n.badImages.Load(), Batches: n.batches.Load(), BatchedItems: n.batchedItems.Load(),
		InFlight: int(n.inFlight.Load()),
	}
}

// ClientStats are the client's transport figures.
type ClientStats struct {
	// HTTPRequests counts every HTTP request made (batches, lists, stats).
	HTTPRequests int64 `json:"http_requests"`
	// Batches counts batch requests; BatchedItems the items in them.
	Batches      int64 `json:"batches"`
	BatchedItems int64 `json:"batched_items"`
	// StaleAnswers counts listings and stats answered from the last seen
	// answer because no server answered.
	StaleAnswers int64 `json:"stale_answers"`
	// Unavailable counts requests a server did not answer.
	Unavailable int64 `json:"unavailable"`
}

// Stats returns the transport figures.
func (c *Client) Stats() ClientStats {
	n := &c.n
	return ClientStats{HTTPRequests: n.httpRequests.Load(), Batches: n.batches.Load(), BatchedItems: n.batchedItems.Load(),
		StaleAnswers: n.staleAnswers.Load(), Unavailable: n.unavailable.Load()}
}

// Extract returns the .npy file of req's feature from the server req.Key is
// routed to; req.Fetch is not used. Errors: a bad image is an
// *extractor.ImageError; a missing object matches bucket.ErrNotFound; a
// server that does not answer within the timeout matches ErrUnavailable.
func (e *Extractor) Extract(ctx context.Context, req extractor.Request) ([]byte, error) {
	c := e.c
	m, ok := c.byName[req.Model]
	if !ok {
		return nil, fmt.Errorf("extract %s: %w %q", req.Key, extractor.ErrUnknownModel, req.Model)
	}
	if req.Layer < 0 || req.Layer >= len(m.Layers) {
		return nil, fmt.Errorf("extract %s: %w %d of model %s (it has %d)", req.Key, extractor.ErrUnknownLayer, req.Layer, m.Name, len(m.Layers))
	}
	c.n.requests.Add(1)
	c.n.inFlight.Add(1)
	defer c.n.inFlight.Add(-1)
	cl := &call{item: BatchItem{Model: req.Model, Layer: req.Layer, Key: req.Key, ETag: req.ETag}, ctx: ctx, done: make(chan struct{})}
	s := c.servers[Rank(c.cfg.URLs, req.Key)[0]]
	queue := s.fg
	if req.Priority == extractor.Background {
		queue = s.bg
	}
	select {
	case queue <- cl:
	case <-ctx.Done():
		c.n.failed.Add(1)
		return nil, ctx.Err()
	case <-c.stop:
		return nil, fmt.Errorf("extract %s: %w: client closed", req.Key, ErrUnavailable)
	}
	select {
	case <-cl.done:
	case <-ctx.Done():
		c.n.failed.Add(1)
		return nil, ctx.Err()
	}
	switch {
	case cl.err == nil:
		c.n.completed.Add(1)
	case errors.Is(cl.err, extractor.ErrBadImage):
		c.n.badImages.Add(1)
		c.n.failed.Add(1)
	default:
		c.n.failed.Add(1)
	}
	return cl.data, cl.err
}

// loop gathers queued calls into batches: a batch waits up to MaxWait to
// fill, then for a free slot (MaxInFlight per server), filling up to
// MaxBatch while it waits. Foreground calls are taken before background
// ones.
func (s *server) loop() {
	c := s.c
	closed := fmt.Errorf("%w: client closed", ErrUnavailable)
	for {
		var batch []*call
		if cl := s.take(); cl != nil {
			batch = append(batch, cl)
		} else {
			select {
			case cl := <-s.fg:
				batch = append(batch, cl)
			case cl := <-s.bg:
				batch = append(batch, cl)
			case <-c.stop:
				s.drain()
				return
			}
		}
		timer := time.NewTimer(c.cfg.MaxWait)
	fill:
		for len(batch) < c.cfg.MaxBatch {
			if cl := s.take(); cl != nil {
				batch = append(batch, cl)
				continue
			}
			select {
			case cl := <-s.fg:
				batch = append(batch, cl)
			case cl := <-s.bg:
				batch = append(batch, cl)
			case <-timer.C:
				break fill
			case <-c.stop:
				timer.Stop()
				s.fail(batch, closed)
				s.drain()
				return
			}
		}
		timer.Stop()
	slot:
		for {
			if len(batch) < c.cfg.MaxBatch {
				if cl := s.take(); cl != nil {
					batch = append(batch, cl)
					continue
				}
			}
			var fg, bg chan *call // nil (never ready) once the batch is full
			if len(batch) < c.cfg.MaxBatch {
				fg, bg = s.fg, s.bg
			}
			select {
			case s.slots <- struct{}{}:
				break slot
			case cl := <-fg:
				batch = append(batch, cl)
			case cl := <-bg:
				batch = append(batch, cl)
			case <-c.stop:
				s.fail(batch, closed)
				s.drain()
				return
			}
		}
		go func() {
			defer func() { <-s.slots }()
			s.send(batch)
		}()
	}
}

// take returns a queued call without waiting, foreground first, or nil.
func (s *server) take() *call {
	select {
	case cl := <-s.fg:
		return cl
	default:
	}
	select {
	case cl := <-s.bg:
		return cl
	default:
		return nil
	}
}

// drain fails every queued call (the client is closing).
func (s *server) drain() {
	for cl := s.take(); cl != nil; cl = s.take() {
		s.fail([]*call{cl}, fmt.Errorf("%w: client closed", ErrUnavailable))
	}
}

// fail finishes calls with err.
func (s *server) fail(calls []*call, err error) {
	for _, cl := range calls {
		if cl != nil {
			cl.err = fmt.Errorf("%s: %w", cl.item.Key, err)
			close(cl.done)
		}
	}
}

// send makes one POST /v1/batch and answers each call as its frame comes.
// A watchdog cancels the request when the server stays silent for Timeout.
func (s *server) send(batch []*call) {
	c := s.c
	// Calls whose reader gave up are not sent.
	live := batch[:0]
	for _, cl := range batch {
		if err := cl.ctx.Err(); err != nil {
			cl.err = err
			close(cl.done)
			continue
		}
		live = append(live, cl)
	}
	batch = live
	if len(batch) == 0 {
		return
	}
	reqBody := BatchRequest{Items: make([]BatchItem, len(batch))}
	for i, cl := range batch {
		reqBody.Items[i] = cl.item
	}
	body, err := json.Marshal(reqBody)
	if err != nil {
		s.fail(batch, err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var silent atomic.Bool
	watchdog := time.AfterFunc(c.cfg.Timeout, func() {
		silent.Store(true)
		cancel()
	})
	defer watchdog.Stop()
	pending := batch
	failRest := func(err error) {
		if silent.Load() {
			err = fmt.Errorf("no answer for %v: %w", c.cfg.Timeout, ErrUnavailable)
		}
		c.n.unavailable.Add(1)
		s.fail(pending, fmt.Errorf("%s: %w", s.url, err))
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/batch", bytes.NewReader(body))
	if err != nil {
		s.fail(batch, err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	c.authorize(req)
	c.n.httpRequests.Add(1)
	c.n.batches.Add(1)
	c.n.batchedItems.Add(int64(len(batch)))
	resp, err := c.http.Do(req)
	if err != nil {
		failRest(fmt.Errorf("%w: %w", ErrUnavailable, err))
		return
	}
	defer resp.Body.Close()
	watchdog.Reset(c.cfg.Timeout)
	if resp.StatusCode != http.StatusOK {
		err := responseError(resp, s.url, "batch")
		s.fail(batch, err)
		return
	}
	n, err := readStreamHeader(resp.Body)
	if err != nil {
		failRest(fmt.Errorf("%w: %w", ErrUnavailable, err))
		return
	}
	if n != len(batch) {
		failRest(fmt.Errorf("batch stream announces %d items, %d were asked for", n, len(batch)))
		return
	}
	pending = append([]*call(nil), batch...)
	left := len(batch)
	for left > 0 {
		f, err := ReadFrame(resp.Body, c.maxData+(1<<16))
		if err != nil {
			failRest(fmt.Errorf("%w: %w", ErrUnavailable, noEOF(err)))
			return
		}
		watchdog.Reset(c.cfg.Timeout)
		if f.Index == HeartbeatIndex {
			continue
		}
		if int(f.Index) >= len(batch) || pending[f.Index] == nil {
			failRest(fmt.Errorf("batch stream: unexpected frame for item %d", f.Index))
			return
		}
		cl := pending[f.Index]
		pending[f.Index] = nil
		left--
		if f.Status == StatusOK {
			cl.data = f.Data
		} else {
			cl.err = ErrorOf(int(f.Status), f.Message, s.url, cl.item.Key)
		}
		close(cl.done)
	}
}
