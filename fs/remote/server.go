package remote

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/featurefs/featurefs/cache/codec"
	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/augment"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/figures"
	"github.com/featurefs/featurefs/fs/httplimit"
	"github.com/featurefs/featurefs/fs/internal/lifetime"
)

// ServerConfig is the server's own settings: what NewServer needs beyond
// the pipeline it computes features with. Token is required unless NoAuth.
// The settings the server shares with the read path (the source, the
// extractor, the logger, the image extensions, MaxObjectSize, and
// ReadTimeout, which bounds each item) are the pipeline's
// (features.Pipeline.Config).
type ServerConfig struct {
	// Token is the bearer token every /v1/ request must carry.
	Token string
	// NoAuth accepts requests without a token (Token must be empty).
	NoAuth bool

	// The limits below must be positive: featurefs serve passes its
	// flags' values (mountopts holds the defaults); none is defaulted here.

	// MaxConcurrent bounds the features being computed at once over all
	// requests (--max-concurrent). A slot is held until the computation it
	// started ends, even when the request that started it went away.
	MaxConcurrent int
	// MaxBatchItems bounds the items of one batch (--max-batch-items).
	MaxBatchItems int
	// MaxRequestBytes bounds a request body (--max-request-bytes).
	MaxRequestBytes int64
	// Heartbeat is how often a batch stream with nothing else to send sends
	// a heartbeat frame (--heartbeat).
	Heartbeat time.Duration

	// ProfileDir caches the compute profiles GET /v1/profile measures
	// (split execution); empty: kept in memory only.
	ProfileDir string

	// WireCompression compresses the features of batch answers for
	// clients that read EncodingFFZ1 (cache/codec; a feature that does not
	// shrink goes as it is); zero sends them plain.
	WireCompression codec.Method

	// MaxBufferedBytes bounds the bytes of features computed for answers
	// and not yet written to their clients, over all requests
	// (--max-buffered-bytes). A batch item or GET /v1/feature reserves
	// its feature's size before it is computed (an item larger than the
	// bound reserves the whole bound).
	MaxBufferedBytes int64
	// MaxBufferedBytesPerRequest bounds them per request
	// (--max-buffered-bytes-per-request; at most MaxBufferedBytes).
	MaxBufferedBytesPerRequest int64
	// WriteTimeout bounds how long a client may take to accept each
	// httplimit.WriteChunk (256 KiB) of an answer; past it the connection
	// is closed and the request's work cancelled (--write-timeout).
	WriteTimeout time.Duration
	// BodyTimeout bounds the arrival of a request body.
	BodyTimeout time.Duration
}

const (
	// MaxKeyBytes bounds an object key in a request (S3's bound); a longer
	// one is 400.
	MaxKeyBytes = 1024
	// npyHeaderBytes is more than a .npy header of any layer takes.
	npyHeaderBytes = 512
)

// Server answers the HTTP API of docs/SERVE.md. It is an http.Handler.
// Close it after the HTTP server has shut down, and its pipeline after it.
type Server struct {
	// Constant after NewServer.
	cfg  ServerConfig
	log  *slog.Logger
	pipe *features.Pipeline
	// bucket and ex are the pipeline's source and extractor as given
	// (features.Pipeline.Config): the server's listings, stats and split
	// work are not the read path's figures.
	bucket bucket.Bucket
	ex     features.Extractor
	// itemTimeout bounds one listing, stat or split item: the pipeline's
	// ReadTimeout, which bounds each feature (5m when it has none).
	itemTimeout time.Duration
	// maxObjectSize and imageExts are the pipeline's (split raw).
	maxObjectSize int64
	imageExts     []string
	tokenHash     [sha256.Size]byte
	models        atomic.Pointer[modelsAnswer] // GET /v1/models (ModelsChanged)
	mux           *http.ServeMux
	handler       http.Handler        // mux under the body and write deadlines
	buffered      *byteBudget         // answer bytes computed and not yet written
	allow         map[string][]string // path -> the methods it answers
	sem           chan struct{}
	owner         *lifetime.Owner // the computations, which outlive requests
	sendCost      byteCost        // CPU per byte of GET /v1/probe answers

	n serverCounters
}

// serverCounters are the server's figures.
type serverCounters struct {
	requests, unauthorized, batches, items, itemsFailed, shared atomic.Int64
	features, lists, stats, bytesOut, heartbeats                atomic.Int64
	inFlight, rawBytesOut, compressNanos, objects               atomic.Int64
}

// ServerStats are the server's own figures (GET /v1/stats "server").
type ServerStats struct {
	// Requests counts HTTP requests to /v1/.
	Requests int64 `json:"requests"`
	// Unauthorized counts requests refused with 401.
	Unauthorized int64 `json:"unauthorized"`
	// Batches counts POST /v1/batch requests answered.
	Batches int64 `json:"batches"`
	// Items counts batch items answered.
	Items int64 `json:"items"`
	// ItemsFailed counts batch items answered with an error status.
	ItemsFailed int64 `json:"items_failed"`
	// Shared counts batch items that were duplicates of another item of
	// the same batch.
	Shared int64 `json:"shared"`
	// Features counts GET /v1/feature requests.
	Features int64 `json:"features"`
	// Lists counts GET /v1/list requests.
	Lists int64 `json:"lists"`
	// Stats counts GET /v1/stat requests.
	Stats int64 `json:"stats"`
	// BytesOut counts feature bytes sent; RawBytesOut what they were
	// before compression (EncodingFFZ1), and CompressSeconds the time
	// spent compressing them.
	BytesOut        int64   `json:"bytes_out"`
	RawBytesOut     int64   `json:"raw_bytes_out"`
	CompressSeconds float64 `json:"compress_seconds"`
	// Heartbeats counts heartbeat frames sent.
	Heartbeats int64 `json:"heartbeats"`
	// InFlight is the number of features being computed now.
	InFlight int64 `json:"in_flight"`
	// BufferedBytes is the bytes of answers computed (or reserved for a
	// computation) and not yet written (at most MaxBufferedBytes).
	BufferedBytes int64 `json:"buffered_bytes"`
	// Objects counts images sent whole (GET /v1/object, split raw).
	Objects int64 `json:"objects"`
}

// NewServer checks cfg (every limit must be given) and returns the server over p,
// the read path it computes features with. The caller owns p: it closes p
// after the server (Close leaves p open).
func NewServer(p *features.Pipeline, cfg ServerConfig) (*Server, error) {
	if p == nil {
		return nil, errors.New("remote.NewServer: a pipeline is required")
	}
	switch {
	case cfg.Token == "" && !cfg.NoAuth:
		return nil, errors.New("remote.NewServer: no token: give one (--token-file or FEATUREFS_TOKEN) or allow unauthenticated access (--no-auth)")
	case cfg.Token != "" && cfg.NoAuth:
		return nil, errors.New("remote.NewServer: a token and NoAuth together")
	}
	// The limits featurefs serve sets (mountopts holds their defaults)
	// are taken as given, never defaulted again here.
	for _, l := range []struct {
		name string
		v    int64
	}{{"MaxConcurrent", int64(cfg.MaxConcurrent)}, {"MaxBatchItems", int64(cfg.MaxBatchItems)}, {"MaxRequestBytes", cfg.MaxRequestBytes},
		{"Heartbeat", int64(cfg.Heartbeat)}, {"MaxBufferedBytes", cfg.MaxBufferedBytes}, {"MaxBufferedBytesPerRequest", cfg.MaxBufferedBytesPerRequest},
		{"WriteTimeout", int64(cfg.WriteTimeout)}, {"BodyTimeout", int64(cfg.BodyTimeout)}} {
		if l.v <= 0 {
			return nil, fmt.Errorf("remote.NewServer: %s must be positive", l.name)
		}
	}
	cfg.MaxBufferedBytesPerRequest = min(cfg.MaxBufferedBytesPerRequest, cfg.MaxBufferedBytes)
	pc := p.Config()
	if pc.ReadTimeout <= 0 {
		// Every item is bounded: the pipeline's ReadTimeout is serve's
		// --item-timeout.
		return nil, fmt.Errorf("remote.NewServer: the pipeline's ReadTimeout (--item-timeout) must be positive")
	}
	s := &Server{
		cfg:           cfg,
		log:           pc.Logger,
		pipe:          p,
		bucket:        pc.Bucket,
		ex:            pc.Extractor,
		itemTimeout:   pc.ReadTimeout,
		maxObjectSize: pc.MaxObjectSize,
		imageExts:     pc.ImageExtensions,
		tokenHash:     sha256.Sum256([]byte(cfg.Token)),
		sem:           make(chan struct{}, cfg.MaxConcurrent),
		mux:           http.NewServeMux(),
		allow:         map[string][]string{},
		buffered:      newByteBudget(cfg.MaxBufferedBytes),
		owner:         lifetime.New(),
	}
	if err := s.ModelsChanged(); err != nil {
		return nil, fmt.Errorf("remote.NewServer: %w", err)
	}
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(w, "ok")
	})
	s.handle("GET", "/v1/models", s.handleModels)
	s.handle("GET", "/v1/list", s.handleList)
	s.handle("GET", "/v1/stat", s.handleStat)
	s.handle("GET", "/v1/feature", s.handleFeature)
	s.handle("GET", "/v1/viewparams", s.handleViewParams)
	s.handle("POST", "/v1/batch", s.handleBatch)
	s.handle("GET", "/v1/stats", s.handleStats)
	s.registerSplit() // split_server.go
	s.mux.HandleFunc("/v1/", s.auth(func(w http.ResponseWriter, r *http.Request) {
		if methods := s.allow[r.URL.Path]; len(methods) > 0 {
			allow := strings.Join(methods, ", ")
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, fmt.Errorf("%s %s: method not allowed (allowed: %s)", r.Method, r.URL.Path, allow))
			return
		}
		writeError(w, http.StatusNotFound, fmt.Errorf("no endpoint %s %s", r.Method, r.URL.Path))
	}))
	s.handler = httplimit.Handler(s.mux, httplimit.Timeouts{Body: cfg.BodyTimeout, Write: cfg.WriteTimeout})
	return s, nil
}

// handle registers an authenticated endpoint and the method it allows
// (GET allows HEAD too); another method on its path is answered 405 with
// an Allow header.
func (s *Server) handle(method, path string, h http.HandlerFunc) {
	s.mux.HandleFunc(method+" "+path, s.auth(h))
	s.allow[path] = append(s.allow[path], method)
	if method == http.MethodGet {
		s.allow[path] = append(s.allow[path], http.MethodHead)
	}
}

// Close cancels the computations still running (those whose requests went
// away, or all of them when the HTTP server did not shut down first) and
// waits for them; an extraction inside ONNX Runtime cannot be interrupted
// and is waited for. The pipeline stays open (its owner closes it after
// Close, then the extractor and the cache). Requests after Close fail.
// Safe to call more than once.
func (s *Server) Close() error {
	s.owner.Close()
	return nil
}

// ServeHTTP answers one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Pipeline returns the read path the server computes features with.
func (s *Server) Pipeline() *features.Pipeline { return s.pipe }

// Stats returns the server's own figures.
func (s *Server) Stats() ServerStats {
	n := &s.n
	return ServerStats{
		Requests: n.requests.Load(), Unauthorized: n.unauthorized.Load(), Batches: n.batches.Load(),
		Items: n.items.Load(), ItemsFailed: n.itemsFailed.Load(), Shared: n.shared.Load(),
		Features: n.features.Load(), Lists: n.lists.Load(), Stats: n.stats.Load(),
		BytesOut: n.bytesOut.Load(), Heartbeats: n.heartbeats.Load(), InFlight: n.inFlight.Load(),
		RawBytesOut: n.rawBytesOut.Load(), CompressSeconds: time.Duration(n.compressNanos.Load()).Seconds(),
		BufferedBytes: s.buffered.inUse(), Objects: n.objects.Load(),
	}
}

func (s *Server) modelsResponse() ModelsResponse {
	resp := ModelsResponse{
		Protocol: ProtocolVersion,
		Source:   s.bucket.Identity(),
		DType:    s.ex.DType(),
		Device:   s.ex.Device(),
		Limits: Limits{
			MaxBatchItems:   s.cfg.MaxBatchItems,
			MaxRequestBytes: s.cfg.MaxRequestBytes,
			MaxConcurrent:   s.cfg.MaxConcurrent,
		},
	}
	if s.cfg.WireCompression != 0 {
		resp.Encodings = []string{EncodingFFZ1}
	}
	resp.Features = []string{FeatureAugment}
	for _, m := range s.ex.Models() {
		mi := ModelInfo{
			Name: m.Name, Digest: m.Digest, Preprocess: m.Preprocess, PreprocessKey: m.Preprocess.Key(),
			Aliases: m.Aliases, Table: m.Table(),
		}
		if lt, ok := s.ex.(loadTimer); ok {
			if at, ok := lt.LoadedAt(m.Name, m.Digest); ok {
				mi.LoadedAt = at.UTC().Format(time.RFC3339Nano)
			}
		}
		for _, l := range m.Layers {
			mi.Layers = append(mi.Layers, LayerInfo{Index: l.Index, Name: l.Name, Tensor: l.Tensor, Shape: l.Shape, Bytes: l.Bytes, CumGFLOPs: l.CumGFLOPs, Digest: l.Digest})
		}
		resp.Models = append(resp.Models, mi)
	}
	resp.Version = ModelsVersion(resp.Models)
	return resp
}

// modelsAnswer is the body of GET /v1/models and its version.
type modelsAnswer struct {
	body    []byte
	version string
}

// ModelsChanged makes GET /v1/models, and the ModelsVersionHeader of every
// answer, show the extractor's models as they are now: call it after a
// model was reloaded (featurefs serve's watcher does). Clients then learn
// the new version from their next answer.
func (s *Server) ModelsChanged() error {
	resp := s.modelsResponse()
	b, err := json.Marshal(resp)
	if err != nil {
		return err
	}
	s.models.Store(&modelsAnswer{body: b, version: resp.Version})
	return nil
}

// previouser is an extractor that keeps a model's previous version after a
// reload (extractor.Service.Previous).
type previouser interface {
	Previous(name string) (*api.Model, bool)
}

// loadTimer is an extractor that tells when it loaded a model's current
// version (extractor.Service.LoadedAt): GET /v1/models reports it
// (ModelInfo.LoadedAt).
type loadTimer interface {
	LoadedAt(name, digest string) (time.Time, bool)
}

// version returns the view an item is computed with: the layer of the
// model version whose layer digest is it.Digest (the current version, or
// the previous one the extractor keeps), the current one when it.Digest is
// empty. An item naming a version the server no longer holds matches
// api.ErrModelReplaced (StatusModelChanged).
func (s *Server) version(it BatchItem) (*features.View, error) {
	m, ok := s.ex.Model(it.Model)
	if !ok {
		return nil, fmt.Errorf("%s: %w %s", it.Key, api.ErrUnknownModel, echo(it.Model))
	}
	if it.Layer < 0 || it.Layer >= len(m.Layers) {
		return nil, fmt.Errorf("%s: %w %d of model %s (it has %d)", it.Key, api.ErrUnknownLayer, it.Layer, it.Model, len(m.Layers))
	}
	if it.Digest == "" || m.Layers[it.Layer].Digest == it.Digest {
		return s.pipe.NewView(m, m.Layers[it.Layer]), nil
	}
	if p, ok := s.ex.(previouser); ok {
		if pm, ok := p.Previous(it.Model); ok && it.Layer < len(pm.Layers) && pm.Layers[it.Layer].Digest == it.Digest {
			return s.pipe.NewView(pm, pm.Layers[it.Layer]), nil
		}
	}
	return nil, fmt.Errorf("%s: model %s layer %d at digest %.12s: %w (the server serves %.12s; GET /v1/models)",
		it.Key, it.Model, it.Layer, it.Digest, api.ErrModelReplaced, m.Layers[it.Layer].Digest)
}

// itemView is the view an item asks for: its layer at its version
// (version), augmented when it.Aug is on.
func (s *Server) itemView(it BatchItem) (*features.View, error) {
	v, err := s.version(it)
	if err != nil || !it.Aug.On {
		return v, err
	}
	return s.pipe.NewAugView(v.Model, v.Layer, it.Aug.Spec()), nil
}

// handleViewParams answers GET /v1/viewparams: the parameters of an
// augmented view (model, layer, key, etag, digest as /v1/feature; view,
// seed, scale=lo,hi and ratio=lo,hi) as JSON, augment.Params. The server
// fetches the image's header (features.Pipeline.ViewParams); no feature is
// computed.
func (s *Server) handleViewParams(w http.ResponseWriter, r *http.Request) {
	it, err := viewParamsItem(r.URL.Query())
	if err == nil {
		err = checkKey(it.Key)
	}
	if err == nil {
		err = it.Aug.check()
	}
	if err != nil {
		writeError(w, StatusBadRequest, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.itemTimeout)
	defer cancel()
	v, err := s.itemView(it)
	obj := bucket.Object{Key: it.Key, ETag: it.ETag}
	if err == nil && it.ETag == "" {
		obj, err = s.bucket.Stat(ctx, it.Key)
	}
	var params augment.Params
	if err == nil {
		params, err = s.pipe.ViewParams(ctx, v, obj)
	}
	if err != nil {
		s.logItemError("viewparams", it.Key, err)
		writeError(w, StatusOf(err), s.public(it.Key, err))
		return
	}
	writeJSON(w, params)
}

// auth wraps a handler with the bearer-token check (constant time; the
// token is never logged).
func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.n.requests.Add(1)
		if !s.cfg.NoAuth {
			given, ok := bearerToken(r.Header.Get("Authorization"))
			gh := sha256.Sum256([]byte(given))
			if !ok || subtle.ConstantTimeCompare(gh[:], s.tokenHash[:]) != 1 {
				s.n.unauthorized.Add(1)
				s.log.Info("featurefs serve: unauthorized request", slog.String("remote", r.RemoteAddr),
					slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Bool("token_given", ok))
				w.Header().Set("WWW-Authenticate", `Bearer realm="featurefs"`)
				// Not kept alive: an unauthenticated connection costs
				// nothing past its answer.
				w.Header().Set("Connection", "close")
				writeError(w, http.StatusUnauthorized, errors.New("missing or wrong bearer token"))
				return
			}
		}
		// The connection now serves an authorized request: the listener
		// (fs/httplimit) keeps it when making room for new ones.
		defer httplimit.Admit(r)()
		w.Header().Set(ModelsVersionHeader, s.models.Load().version)
		h(w, r)
	}
}

// bearerToken returns the token of an Authorization header of the Bearer
// scheme, whose name is case-insensitive (RFC 7235 section 2.1).
func bearerToken(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// writeError answers a whole request with a JSON error.
func writeError(w http.ResponseWriter, status int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(ErrorResponse{Error: err.Error(), Status: status})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(s.models.Load().body)
}

func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, struct {
		Server ServerStats   `json:"server"`
		FS     figures.Stats `json:"fs"`
	}{s.Stats(), s.pipe.Stats()})
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	s.n.lists.Add(1)
	q := r.URL.Query()
	prefix := q.Get("prefix")
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		writeError(w, StatusBadRequest, fmt.Errorf("prefix %s: want \"\" or a prefix ending in /", echo(prefix)))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.itemTimeout)
	defer cancel()
	p, err := s.bucket.List(ctx, prefix, q.Get("continuation"))
	if err != nil {
		s.log.Warn("featurefs serve: list failed", slog.String("key", prefix), slog.Any("err", err))
		writeError(w, StatusOf(err), s.public(prefix, err))
		return
	}
	resp := ListResponse{Prefixes: p.Prefixes, Objects: make([]ObjectInfo, 0, len(p.Objects)), Next: p.Next, Archives: p.Archives}
	if resp.Prefixes == nil {
		resp.Prefixes = []string{}
	}
	for _, o := range p.Objects {
		resp.Objects = append(resp.Objects, objectInfo(o))
	}
	writeJSON(w, resp)
}

func (s *Server) handleStat(w http.ResponseWriter, r *http.Request) {
	s.n.stats.Add(1)
	key := r.URL.Query().Get("key")
	if err := checkKey(key); err != nil {
		writeError(w, StatusBadRequest, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.itemTimeout)
	defer cancel()
	o, err := s.bucket.Stat(ctx, key)
	if err != nil {
		s.logItemError("stat", key, err)
		writeError(w, StatusOf(err), s.public(key, err))
		return
	}
	writeJSON(w, objectInfo(o))
}

func (s *Server) handleFeature(w http.ResponseWriter, r *http.Request) {
	s.n.features.Add(1)
	it, err := queryItem(r.URL.Query())
	if err != nil {
		writeError(w, StatusBadRequest, err)
		return
	}
	held, err := s.buffered.acquire(r.Context(), s.itemBytes(it))
	if err != nil {
		writeError(w, StatusOf(err), s.public(it.Key, err))
		return
	}
	defer s.buffered.release(held)
	data, err := s.feature(r.Context(), it)
	if err != nil {
		s.logItemError("feature", it.Key, err)
		writeError(w, StatusOf(err), s.public(it.Key, err))
		return
	}
	s.n.bytesOut.Add(int64(len(data)))
	s.n.rawBytesOut.Add(int64(len(data)))
	w.Header().Set("Content-Type", NPYContentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.Write(data)
}

// feature computes one item under the concurrency bound and the item timeout.
// The computation holds its slot until it ends: when ctx ends first,
// feature returns ctx.Err() and the computation goes on (it fills the
// cache) under the server's lifetime, still counted against MaxConcurrent.
func (s *Server) feature(ctx context.Context, it BatchItem) ([]byte, error) {
	if it.Model == "" {
		return nil, fmt.Errorf("item needs a model and a key: %w", errBadItem)
	}
	if err := it.Aug.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", it.Key, err)
	}
	if err := checkKey(it.Key); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.itemTimeout)
	defer cancel()
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: waiting for a slot: %w", it.Key, ctx.Err())
	}
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	// Detached from the request, bounded by the item timeout and Close.
	cctx, ccancel := s.owner.Detach(ctx)
	cctx, tcancel := context.WithTimeout(cctx, s.itemTimeout)
	s.n.inFlight.Add(1)
	release := func() { // the slot and the contexts, once the computation ends
		tcancel()
		ccancel()
		s.n.inFlight.Add(-1)
		<-s.sem
	}
	if !s.owner.Go(func() {
		defer release()
		data, err := s.compute(cctx, it)
		if err != nil && s.owner.Context().Err() != nil {
			err = fmt.Errorf("%s: %w: the server is closing (%w)", it.Key, lifetime.ErrClosed, err)
		}
		done <- result{data, err}
	}) {
		release()
		return nil, fmt.Errorf("%s: %w: the server is closing", it.Key, lifetime.ErrClosed)
	}
	select {
	case r := <-done:
		return r.data, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// compute stats the item's object if no ETag is given and computes its
// feature.
func (s *Server) compute(ctx context.Context, it BatchItem) ([]byte, error) {
	v, err := s.itemView(it)
	if err != nil {
		return nil, err
	}
	obj := bucket.Object{Key: it.Key, ETag: it.ETag}
	if it.ETag == "" {
		if obj, err = s.bucket.Stat(ctx, it.Key); err != nil {
			return nil, err
		}
	}
	if it.Transient {
		return s.pipe.FeatureUncached(ctx, v, obj)
	}
	return s.pipe.FeatureAt(ctx, v, obj)
}

// itemResult is one computed unique item of a batch.
type itemResult struct {
	idx   []int // the request positions it answers
	data  []byte
	flags uint16 // of the frames: FrameCompressed when data is a blob
	raw   int    // the feature's plain length
	err   error
	held  int64 // bytes reserved in the request's and the server's budgets
}

// handleBatch answers POST /v1/batch: the request read within its limits,
// one computation per distinct item on at most --max-concurrent workers,
// and the results streamed as they come (streamBatch).
func (s *Server) handleBatch(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	req, ok := s.readBatchRequest(w, r)
	if !ok {
		return
	}
	s.n.batches.Add(1)
	compress := s.cfg.WireCompression != 0 && slices.Contains(req.Encodings, EncodingFFZ1)
	jobs := s.distinctJobs(req.Items)
	run := s.newBatchRun(r.Context(), len(jobs), compress)
	// The workers and the feeder are this handler's: it waits for them
	// all before it returns (the deferred wg.Wait, after cancel).
	var wg sync.WaitGroup
	queue := make(chan *batchJob)
	for range min(len(jobs), s.cfg.MaxConcurrent) {
		wg.Go(func() { run.work(queue) })
	}
	wg.Go(func() { run.feed(queue, jobs) })
	defer func() {
		run.cancel()
		wg.Wait()
		run.releaseUnwritten()
	}()
	failed, ok := s.streamBatch(w, r, req.Items, run, len(jobs))
	if !ok {
		return
	}
	s.log.Debug("featurefs serve: batch", slog.String("remote", r.RemoteAddr), slog.Int("items", len(req.Items)),
		slog.Int("distinct", len(jobs)), slog.Int("failed", failed), slog.Duration("took", time.Since(start)))
}

// readBatchRequest decodes a batch request within --max-request-bytes and
// --max-batch-items, reading the body to its end (its read deadline is
// lifted there, and the server then notices a client going away). On an
// error it answers it and returns false.
func (s *Server) readBatchRequest(w http.ResponseWriter, r *http.Request) (BatchRequest, bool) {
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxRequestBytes)
	var req BatchRequest
	err := json.NewDecoder(body).Decode(&req)
	if err == nil {
		_, err = io.Copy(io.Discard, body)
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("request body over %d bytes (--max-request-bytes)", s.cfg.MaxRequestBytes))
			return req, false
		}
		writeError(w, StatusBadRequest, fmt.Errorf("batch request: %w", err))
		return req, false
	}
	if len(req.Items) > s.cfg.MaxBatchItems {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("%d items: at most %d per batch (--max-batch-items)", len(req.Items), s.cfg.MaxBatchItems))
		return req, false
	}
	return req, true
}

// batchJob is one distinct item of a batch and the indexes it answers.
type batchJob struct {
	it  BatchItem
	idx []int
}

// distinctJobs returns one job per distinct item, in first-seen order,
// counting the repeats as shared.
func (s *Server) distinctJobs(items []BatchItem) []*batchJob {
	var jobs []*batchJob
	seen := map[BatchItem]*batchJob{}
	for i, it := range items {
		if j, ok := seen[it]; ok {
			j.idx = append(j.idx, i)
			s.n.shared.Add(1)
			continue
		}
		j := &batchJob{it: it, idx: []int{i}}
		seen[it] = j
		jobs = append(jobs, j)
	}
	return jobs
}

// batchRun is one batch's computations (its handler runs the workers
// and the feeder, and waits for them) and the bytes its computed features
// hold.
type batchRun struct {
	s        *Server
	ctx      context.Context
	cancel   context.CancelFunc
	compress bool
	results  chan itemResult // one per job; buffered, so no worker blocks on it
	// mine bounds this request's computed and unwritten features: a
	// client that reads slowly (or not at all) holds at most
	// MaxBufferedBytesPerRequest, and all requests together the server's
	// buffered budget.
	mine *byteBudget
}

// newBatchRun returns the run of a batch of n distinct items under a
// context cancelled when the handler returns (before the workers are
// waited for), so that a client that went away stops its items.
func (s *Server) newBatchRun(parent context.Context, n int, compress bool) *batchRun {
	ctx, cancel := context.WithCancel(parent)
	return &batchRun{s: s, ctx: ctx, cancel: cancel, compress: compress,
		results: make(chan itemResult, n), mine: newByteBudget(s.cfg.MaxBufferedBytesPerRequest)}
}

// work computes the jobs of queue until it is closed, each within the
// request's and the server's byte budgets.
func (run *batchRun) work(queue <-chan *batchJob) {
	for j := range queue {
		held, err := run.reserve(run.s.itemBytes(j.it))
		if err != nil {
			run.results <- itemResult{idx: j.idx, err: err}
			continue
		}
		data, err := run.s.feature(run.ctx, j.it)
		res := itemResult{idx: j.idx, data: data, raw: len(data), err: err, held: held}
		if run.compress && !j.it.Plain && err == nil {
			res.data, res.flags = run.s.compress(data)
		}
		run.results <- res
	}
}

// feed hands the jobs to the workers, and closes queue; once the batch is
// cancelled it answers the rest at once (the client is gone anyway).
func (run *batchRun) feed(queue chan<- *batchJob, jobs []*batchJob) {
	defer close(queue)
	for _, j := range jobs {
		select {
		case queue <- j:
		case <-run.ctx.Done():
			run.results <- itemResult{idx: j.idx, err: run.ctx.Err()}
		}
	}
}

// reserve takes n bytes (or what is left of the request's budget) from
// the request's budget and then the server's.
func (run *batchRun) reserve(n int64) (int64, error) {
	n, err := run.mine.acquire(run.ctx, n)
	if err != nil {
		return 0, err
	}
	if _, err := run.s.buffered.acquire(run.ctx, n); err != nil {
		run.mine.release(n)
		return 0, err
	}
	return n, nil
}

// release gives back what reserve took.
func (run *batchRun) release(n int64) {
	run.s.buffered.release(n)
	run.mine.release(n)
}

// releaseUnwritten releases what was computed and never written (the
// workers are done).
func (run *batchRun) releaseUnwritten() {
	for {
		select {
		case res := <-run.results:
			run.release(res.held)
		default:
			return
		}
	}
}

// streamBatch answers the batch: the stream header, then each result as
// it comes (several per flush when ready together), with a heartbeat frame
// while none comes. It returns how many items failed, and false when the
// client went away or stopped reading (logged once; the deferred stop
// cancels the rest).
func (s *Server) streamBatch(w http.ResponseWriter, r *http.Request, items []BatchItem, run *batchRun, jobs int) (failed int, ok bool) {
	w.Header().Set("Content-Type", BatchContentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	bw := bufio.NewWriterSize(w, 64<<10)
	flush := func() error {
		if err := bw.Flush(); err != nil {
			return err
		}
		return rc.Flush()
	}
	answered := 0
	gone := func(err error) (int, bool) {
		s.log.Info("featurefs serve: batch client gone or not reading: its work is cancelled", slog.String("remote", r.RemoteAddr),
			slog.Int("items", len(items)), slog.Int("answered", answered), slog.Any("err", err))
		return failed, false
	}
	if err := writeStreamHeader(bw, len(items)); err != nil {
		return gone(err)
	}
	if err := flush(); err != nil {
		return gone(err)
	}
	hb := time.NewTicker(s.cfg.Heartbeat)
	defer hb.Stop()
	write := func(res itemResult) error {
		err := s.writeResult(bw, items, res, &failed)
		run.release(res.held)
		if err == nil {
			answered++
		}
		return err
	}
	for answered < jobs {
		select {
		case res := <-run.results:
			if err := write(res); err != nil {
				return gone(err)
			}
			// Write whatever else is ready before flushing.
			for more := true; more && answered < jobs; {
				select {
				case res := <-run.results:
					if err := write(res); err != nil {
						return gone(err)
					}
				default:
					more = false
				}
			}
			if err := flush(); err != nil {
				return gone(err)
			}
			hb.Reset(s.cfg.Heartbeat)
		case <-hb.C:
			s.n.heartbeats.Add(1)
			err := WriteFrame(bw, Frame{Index: HeartbeatIndex})
			if err == nil {
				err = flush()
			}
			if err != nil {
				return gone(err)
			}
		}
	}
	return failed, true
}

// compress returns the cache/codec blob of a feature and FrameCompressed,
// or the feature and 0 where the blob would not be smaller.
func (s *Server) compress(data []byte) ([]byte, uint16) {
	t0 := time.Now()
	blob, err := codec.Encode(nil, data, int(s.ex.DType().Size()), s.cfg.WireCompression)
	s.n.compressNanos.Add(int64(time.Since(t0)))
	if err != nil || len(blob) >= len(data) {
		return data, 0
	}
	return blob, FrameCompressed
}

// writeResult writes the frames of one computed item.
func (s *Server) writeResult(w *bufio.Writer, items []BatchItem, res itemResult, failed *int) error {
	f := Frame{Status: StatusOK, Data: res.data, Flags: res.flags}
	if res.err != nil {
		key := ""
		if len(res.idx) > 0 && res.idx[0] < len(items) {
			key = items[res.idx[0]].Key
		}
		s.logItemError("batch", key, res.err)
		f = Frame{Status: uint16(StatusOf(res.err)), Message: s.public(key, res.err).Error()}
		*failed += len(res.idx)
		s.n.itemsFailed.Add(int64(len(res.idx)))
	}
	for _, i := range res.idx {
		f.Index = uint32(i)
		s.n.items.Add(1)
		s.n.bytesOut.Add(int64(len(f.Data)))
		s.n.rawBytesOut.Add(int64(res.raw))
		if err := WriteFrame(w, f); err != nil {
			return err
		}
	}
	return nil
}
