package remote

// The client (docs/SERVE.md): Dial, its configuration and figures. Its
// parts: routing.go (which server a key goes to), batch.go (gathering
// feature requests into batches), wire.go (HTTP, frames, the token) and
// adapter.go (the bucket and extractor a mount uses).

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/internal/lifetime"
	"github.com/featurefs/featurefs/fs/internal/lru"
)

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
	// heartbeat) before the requests waiting on it fail; positive
	// (--remote-timeout).
	Timeout time.Duration
	// MaxBatch is the most items in one batch request; positive
	// (--remote-max-batch).
	MaxBatch int
	// MaxWait is how long a batch waits to fill; 0 sends each batch with
	// what is queued at once (--remote-batch-wait).
	MaxWait time.Duration
	// MaxInFlight is the most batch requests in flight per server;
	// positive (--remote-max-inflight).
	MaxInFlight int
	// MaxPending bounds the items queued per server (default 4096);
	// Extract waits for room beyond it.
	MaxPending int
	// StaleEntries bounds the listing entries kept to answer while no
	// server does (default 1<<20).
	StaleEntries int
	// LagWait bounds how long a read refused by a server that serves an
	// older model version than the client's (a rolling deploy has not
	// reached it yet) waits for that server's reload, asking it again
	// after 200 ms, then twice as long each time (default 10s; never past
	// the read's context).
	LagWait time.Duration
	// PollInterval is how often the client asks every server for its
	// models version (HEAD /v1/models: the ModelsVersionHeader, no body),
	// so that it follows a server's reload even while no read reaches the
	// servers (a mount whose reads all hit its own cache): within
	// PollInterval and one GET /v1/models of the reload. 0: never (the
	// client then learns of a reload from the next answer it gets). A
	// mount sets its --metadata-ttl.
	PollInterval time.Duration
	// Logger receives the client's logs; nil discards.
	Logger *slog.Logger
	// Transport overrides the HTTP transport (tests).
	Transport http.RoundTripper
}

// Client talks to a set of feature servers: it routes each object key to
// one of them by rendezvous hashing, gathers concurrent feature requests
// into batches, and offers the servers' source as a bucket.Bucket (Bucket)
// and their models as an features.Extractor (Extractor).
type Client struct {
	// Constant after Dial.
	cfg     ClientConfig
	log     *slog.Logger
	http    *http.Client
	servers []*server // sorted by URL
	byURL   map[string]*server
	info    ModelsResponse // at Dial: the source, dtype, limits and encodings
	// views is whether every server that answered at Dial computes
	// augmented views (FeatureAugment).
	views    bool
	identity string
	npySizes map[string][]int64 // by model: each layer's .npy size (checkModel; a reload keeps them)
	stop     chan struct{}
	stopOnce sync.Once
	owner    *lifetime.Owner // the queues' loops and the batches in flight

	stale *lru.LRU[string, any] // listing pages and stats, for when no server answers

	// set is the servers' models as last fetched (versions.go): replaced
	// whole by Refresh.
	set        atomic.Pointer[modelSet]
	refreshMu  sync.Mutex                         // serializes Refresh
	notifyMu   sync.Mutex                         // serializes the OnModelReplaced calls, outside refreshMu
	refreshing atomic.Bool                        // a background refresh is running
	onReplaced atomic.Pointer[func(m *api.Model)] // OnModelReplaced

	n clientCounters
}

// clientCounters are the client's figures.
type clientCounters struct {
	requests, completed, failed, badImages atomic.Int64
	batches, batchedItems, httpRequests    atomic.Int64
	staleAnswers, unavailable              atomic.Int64
	inFlight                               atomic.Int64
	wireBytes, rawBytes, decompressNanos   atomic.Int64
}

// Dial checks the servers (GET /v1/models on each; they must agree on the
// source, dtype and models) and starts the batching queues. At least one
// server must answer; those that do not are used once they do.
func Dial(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if len(cfg.URLs) == 0 {
		return nil, errors.New("remote: no server URL")
	}
	// The limits a mount sets (--remote-*: mountopts holds their
	// defaults) are taken as given, never defaulted again here.
	switch {
	case cfg.Timeout <= 0:
		return nil, fmt.Errorf("remote.Dial: Timeout %v: must be positive", cfg.Timeout)
	case cfg.MaxBatch <= 0:
		return nil, fmt.Errorf("remote.Dial: MaxBatch %d: must be positive", cfg.MaxBatch)
	case cfg.MaxWait < 0:
		return nil, fmt.Errorf("remote.Dial: MaxWait %v: must not be negative", cfg.MaxWait)
	case cfg.MaxInFlight <= 0:
		return nil, fmt.Errorf("remote.Dial: MaxInFlight %d: must be positive", cfg.MaxInFlight)
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 4096
	}
	if cfg.StaleEntries <= 0 {
		cfg.StaleEntries = 1 << 20
	}
	if cfg.LagWait <= 0 {
		cfg.LagWait = DefaultLagWait
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
		owner: lifetime.New(),
		stale: lru.New[string, any](cfg.StaleEntries),
	}
	c.byURL = map[string]*server{}
	for _, u := range urls {
		c.servers = append(c.servers, newServer(c, u))
		c.byURL[u] = c.servers[len(c.servers)-1]
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
		case errors.Is(err, ErrUnauthorized), !errors.Is(err, ErrUnavailable):
			return nil, err
		default:
			down = append(down, err)
		}
	}
	if first < 0 {
		return nil, fmt.Errorf("remote: no server answers: %w", errors.Join(down...))
	}
	// The servers must agree; during a rolling deploy they serve different
	// versions of a model, and the mount starts on the newest (newestOf).
	newest, lagging, dis := newestOf(infos, errs)
	if dis != nil {
		return nil, fmt.Errorf("remote: %s and %s disagree: %s; all servers must serve the same source and models", urls[dis.a], urls[dis.b], dis.why)
	}
	if len(lagging) > 0 {
		var names []string
		for _, i := range lagging {
			names = append(names, urls[i])
		}
		c.log.Warn("featurefs: feature servers serve different versions of a model (a deploy in progress?); the mount starts on the newest, and reads routed to the others wait for their reload",
			slog.String("newest", urls[newest]), slog.Any("older", names))
	}
	first = newest
	for _, err := range down {
		c.log.Warn("featurefs: feature server does not answer; routing to it anyway", slog.Any("err", err))
	}
	c.info = infos[first]
	c.views = true
	for i, err := range errs {
		if err == nil && !slices.Contains(infos[i].Features, FeatureAugment) {
			c.views = false
		}
	}
	if c.info.Protocol != ProtocolVersion {
		return nil, fmt.Errorf("remote: %s speaks protocol %d, this featurefs %d", urls[first], c.info.Protocol, ProtocolVersion)
	}
	set, sizes, err := c.buildModels(c.info)
	if err != nil {
		return nil, err
	}
	c.set.Store(set)
	c.npySizes = sizes
	if c.info.Limits.MaxBatchItems > 0 && c.cfg.MaxBatch > c.info.Limits.MaxBatchItems {
		c.cfg.MaxBatch = c.info.Limits.MaxBatchItems
	}
	c.identity = "featurefs+" + strings.Join(urls, ",") + "|" + c.info.Source
	for _, s := range c.servers {
		c.owner.Go(s.loop)
	}
	if cfg.PollInterval > 0 {
		c.owner.Go(c.pollVersions)
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
// disagreement names two servers (by index) whose models answers do not
// agree, and why.
type disagreement struct {
	a, b int
	why  string
}

// newestOf returns the server (an index into infos; errs[i] != nil: it did
// not answer) whose models answer the mount starts on, and the servers
// that serve an older version of some model. Servers must agree (agree),
// except, during a rolling deploy, in the versions of their models: then
// one must serve, of every model whose versions differ, the one loaded
// latest (ModelInfo.LoadedAt), with the same layers and shapes as the
// others' (every server answers 412 for a version it does not hold, and
// the client waits for it to reload: Extractor.ExtractWire).
func newestOf(infos []ModelsResponse, errs []error) (int, []int, *disagreement) {
	pick := -1
	for i := range infos {
		if errs[i] != nil {
			continue
		}
		if pick < 0 {
			pick = i
			continue
		}
		if why := agree(infos[pick], infos[i]); why != "" {
			switch {
			case !versionsOnly(infos[pick], infos[i]):
				return 0, nil, &disagreement{pick, i, why}
			case newer(infos[i], infos[pick]):
				pick = i
			case !newer(infos[pick], infos[i]):
				return 0, nil, &disagreement{pick, i, why + " (neither version loaded later than the other's)"}
			}
		}
	}
	var lagging []int
	for i := range infos {
		if errs[i] != nil || i == pick || agree(infos[pick], infos[i]) == "" {
			continue
		}
		if !newer(infos[pick], infos[i]) {
			return 0, nil, &disagreement{pick, i, agree(infos[pick], infos[i]) + " (neither version loaded later than the other's)"}
		}
		lagging = append(lagging, i)
	}
	return pick, lagging, nil
}

// versionsOnly reports whether a and b differ only in their models'
// versions: the same source, dtype and models (names, preprocessing, layer
// names and shapes), some at other digests.
func versionsOnly(a, b ModelsResponse) bool {
	if a.Source != b.Source || a.DType != b.DType || len(a.Models) != len(b.Models) {
		return false
	}
	for i, ma := range a.Models {
		mb := b.Models[i]
		if ma.Name != mb.Name || ma.PreprocessKey != mb.PreprocessKey || len(ma.Layers) != len(mb.Layers) {
			return false
		}
		for j := range ma.Layers {
			if ma.Layers[j].Name != mb.Layers[j].Name || !slices.Equal(ma.Layers[j].Shape, mb.Layers[j].Shape) {
				return false
			}
		}
	}
	return true
}

// newer reports whether a serves, of every model whose version differs
// from b's, a version loaded later (both with loaded_at), and at least
// one such model.
func newer(a, b ModelsResponse) bool {
	n := 0
	for i, ma := range a.Models {
		mb := b.Models[i]
		if ma.Digest == mb.Digest {
			continue
		}
		ta, erra := time.Parse(time.RFC3339Nano, ma.LoadedAt)
		tb, errb := time.Parse(time.RFC3339Nano, mb.LoadedAt)
		if erra != nil || errb != nil || !ta.After(tb) {
			return false
		}
		n++
	}
	return n > 0
}

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

// buildModels turns a model list (info) into api.Models and each layer's
// .npy size. A
// model past the client's caps (checkModel: names, layer counts, shapes,
// sizes) is refused with one log line and the others are served; an
// answer with more than maxModels models, an unknown dtype or no usable
// model is an error.
func (c *Client) buildModels(info ModelsResponse) (*modelSet, map[string][]int64, error) {
	if err := checkDType(info.DType); err != nil {
		return nil, nil, err
	}
	if len(info.Models) > maxModels {
		return nil, nil, fmt.Errorf("remote: the servers list %d models (at most %d)", len(info.Models), maxModels)
	}
	set := &modelSet{info: info, byName: map[string]*api.Model{}, prev: map[string]*api.Model{}, loaded: map[string]string{}}
	npySizes := map[string][]int64{}
	for _, mi := range info.Models {
		sizes, err := checkModel(mi, info.DType)
		if err == nil && set.byName[mi.Name] != nil {
			err = fmt.Errorf("%w: listed twice", errBadModel)
		}
		// The servers run the model: it has no file here (Path, Input,
		// InputShape and FixedBatch stay zero; the layers table is the
		// servers', ServersTable).
		m := &api.Model{Name: mi.Name, Digest: mi.Digest, Aliases: mi.Aliases, Preprocess: mi.Preprocess, ServersTable: mi.Table}
		if err == nil && m.Preprocess.Key() != mi.PreprocessKey {
			err = fmt.Errorf("preprocessing %q does not round-trip (%q)", mi.PreprocessKey, m.Preprocess.Key())
		}
		if err != nil {
			c.log.Warn("featurefs: feature server's model refused; the others are served",
				slog.String("model", fmt.Sprintf("%.64q", mi.Name)), slog.String("server", c.servers[0].url), slog.Any("err", err))
			continue
		}
		for i, l := range mi.Layers {
			elems := (sizes[i] - int64(len(api.NPYHeader(l.Shape, info.DType)))) / info.DType.Size()
			// Bytes is the layer's float32 activation, computed here, not
			// taken from the server.
			m.Layers = append(m.Layers, api.Layer{Index: l.Index, Name: l.Name, Tensor: l.Tensor, Shape: slices.Clone(l.Shape), Bytes: elems * 4, CumGFLOPs: l.CumGFLOPs, Digest: l.Digest})
		}
		set.models = append(set.models, m)
		set.byName[m.Name] = m
		if len(mi.LoadedAt) <= maxLoadedAtLen {
			set.loaded[m.Name] = mi.LoadedAt
		}
		npySizes[m.Name] = sizes
	}
	if len(set.models) == 0 {
		return nil, nil, errors.New("remote: the servers serve no usable model")
	}
	return set, npySizes, nil
}

// Close stops the batching queues and cancels the batches in flight, and
// waits for both: calls waiting in them fail (ErrUnavailable), and no
// goroutine of the client is left. Safe to call more than once.
func (c *Client) Close() error {
	c.stopOnce.Do(func() { close(c.stop) })
	c.owner.Close()
	c.http.CloseIdleConnections()
	return nil
}

// Info returns the servers' GET /v1/models answer, as last fetched.
func (c *Client) Info() ModelsResponse { return c.set.Load().info }

// ServesViews reports whether the servers compute augmented views: every
// one that answered at Dial lists FeatureAugment (a mount with --augment
// needs it).
func (c *Client) ServesViews() bool { return c.views }

// URLs returns the servers, sorted.
func (c *Client) URLs() []string { return append([]string(nil), c.cfg.URLs...) }

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
	// WireBytes counts the feature bytes batch answers carried, RawBytes
	// the .npy bytes they were (more where the server compressed them:
	// EncodingFFZ1), DecompressSeconds the time spent decompressing.
	WireBytes         int64   `json:"wire_bytes"`
	RawBytes          int64   `json:"raw_bytes"`
	DecompressSeconds float64 `json:"decompress_seconds"`
}

// Stats returns the transport figures.
func (c *Client) Stats() ClientStats {
	n := &c.n
	return ClientStats{HTTPRequests: n.httpRequests.Load(), Batches: n.batches.Load(), BatchedItems: n.batchedItems.Load(),
		StaleAnswers: n.staleAnswers.Load(), Unavailable: n.unavailable.Load(),
		WireBytes: n.wireBytes.Load(), RawBytes: n.rawBytes.Load(), DecompressSeconds: time.Duration(n.decompressNanos.Load()).Seconds()}
}
