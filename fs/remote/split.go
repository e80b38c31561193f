package remote

// Split execution on the mount side (HAPI; docs/SPLIT.md): for a read of
// layer F the mount asks the server for layer S <= F (an ordinary batch item
// with layer S) and finishes S..F with its own extractor (LocalExtractor), or fetches
// the image (S = raw) and extracts it all locally. A Planner per model picks
// S from both sides' compute profiles and the measured bandwidth.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/extractor/split"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/internal/lifetime"
)

// SplitConfig configures split execution.
type SplitConfig struct {
	// Policy is --split: auto, none, raw or a fixed layer.
	Policy spec.SplitPolicy
	// Local runs the mount's part; its models must have the servers'
	// digests (models it lacks are served without split).
	Local LocalExtractor
	// ProfileDir caches the local compute profiles.
	ProfileDir string
	// ProbeBytes is the size of a bandwidth probe (default 1 MiB; a probe
	// that passes in under 50 ms is repeated larger, up to 16 MiB).
	ProbeBytes int64
	// ProbeEvery is how often the bandwidth is measured again (default
	// 20s; the link capacity is the probe plus the features received
	// meanwhile, over the probe's time).
	ProbeEvery time.Duration
	// RawBytes is the mean image size assumed before objects are listed
	// (default 110 KB).
	RawBytes float64
	// MaxRawFetches bounds concurrent image downloads for split raw
	// (default 16).
	MaxRawFetches int
	// MaxObjectSize bounds an image downloaded for split raw, as
	// --max-object-size bounds a local mount's (default
	// bucket.DefaultMaxObjectBytes); a larger one is an error matching
	// bucket.ErrTooLarge.
	MaxObjectSize int64
	// ProfileTimeout bounds getting a server's compute profile (default
	// 10m): the server may measure it first, seconds to minutes on a CPU.
	// The client's silence timeout (ClientConfig.Timeout) still applies:
	// the server sends heartbeats while it measures.
	ProfileTimeout time.Duration
	// ImageExtensions are the mount's image extensions (--image-extensions;
	// nil: spec.DefaultImageExtensions): listed objects of these count
	// towards the mean image size the plan assumes for split raw.
	ImageExtensions []string
	// CalibrateEvery is how often, under --split auto, the mount reads
	// both sides' CPU time to correct the cost model by what a sample
	// costs each (calibrate.go; default 250ms; negative: never).
	CalibrateEvery time.Duration
	// Logger receives the plan decisions; nil discards.
	Logger *slog.Logger

	// calibrateSelf calibrates by a server in this process (tests: its
	// CPU time is the mount's too).
	calibrateSelf bool
}

// LocalExtractor is what split execution needs of the mount's own
// extractor (*extractor.Service implements it): the read path's
// Extractor, its compute profile, and the second half of a split.
type LocalExtractor interface {
	features.Extractor
	// Profile returns the compute profile of model on this extractor's
	// device.
	Profile(ctx context.Context, model string, opts api.ProfileOptions) (*split.Profile, error)
	// ExtractFromVersion computes layer to of model's version digest (the
	// file's sha256: the current version or the previous one kept after a
	// reload; an error matching api.ErrModelReplaced when it holds neither)
	// from a .npy file of its layer from and returns the .npy file of
	// layer to.
	ExtractFromVersion(ctx context.Context, model, digest string, from, to int, npy []byte) ([]byte, error)
}

// SplitExtractor is an features.Extractor over a Client that runs part of each
// model on the mount (see the file comment).
type SplitExtractor struct {
	c        *Client
	inner    *Extractor
	local    LocalExtractor
	log      *slog.Logger
	planners map[string]*split.Planner // by model; constant after Split
	rawSem   chan struct{}
	maxRaw   int64    // bytes of one raw image
	exts     []string // image extensions (SplitConfig.ImageExtensions)
	// owner owns the periodic probes: a child of the client's owner, so
	// that closing either stops them and waits for them.
	owner *lifetime.Owner

	received atomic.Int64 // feature and image bytes received
	probes   atomic.Int64 // bandwidth probes begun plus those ended
	calSelf  bool         // SplitConfig.calibrateSelf
	recvCost byteCost     // CPU per byte of probes received
	rawSum   atomic.Int64 // listed image bytes
	rawN     atomic.Int64 // listed images

	// warnMu guards warned: per model, the (local, servers') digest pair
	// last logged as disagreeing (one entry per model: bounded).
	warnMu sync.Mutex
	warned map[string]string
}

// Split returns the servers' models with split execution. For a policy
// other than none it measures the bandwidth, gets each model's profile from
// a server (bounded by cfg.ProfileTimeout, not by the client's silence
// timeout) and measures the local one (cached in cfg.ProfileDir). A policy
// of none measures nothing: every feature is computed on the servers.
func (c *Client) Split(ctx context.Context, cfg SplitConfig) (*SplitExtractor, error) {
	if cfg.ProbeBytes <= 0 {
		cfg.ProbeBytes = 1 << 20
	}
	if cfg.ProbeEvery <= 0 {
		cfg.ProbeEvery = 20 * time.Second
	}
	if cfg.RawBytes <= 0 {
		cfg.RawBytes = 110 << 10
	}
	if cfg.MaxRawFetches <= 0 {
		cfg.MaxRawFetches = 16
	}
	if cfg.MaxObjectSize <= 0 {
		cfg.MaxObjectSize = bucket.DefaultMaxObjectBytes
	}
	if cfg.ProfileTimeout <= 0 {
		cfg.ProfileTimeout = 10 * time.Minute
	}
	if cfg.CalibrateEvery == 0 {
		cfg.CalibrateEvery = 250 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	x := &SplitExtractor{c: c, inner: c.Extractor(), local: cfg.Local, log: cfg.Logger, planners: map[string]*split.Planner{},
		warned: map[string]string{}, rawSem: make(chan struct{}, cfg.MaxRawFetches), maxRaw: cfg.MaxObjectSize, exts: cfg.ImageExtensions, calSelf: cfg.calibrateSelf}
	x.owner = c.owner.Child()
	if cfg.Policy.Mode == "none" || cfg.Policy.Mode == "" {
		// Nothing to plan: no probe, no profile (a short --remote-timeout
		// must not fail the mount on a profile it does not need).
		return x, nil
	}
	if cfg.Local == nil {
		return nil, fmt.Errorf("split %s: needs the models on the mount too (--model)", cfg.Policy)
	}
	if cfg.Local.DType() != c.info.DType {
		return nil, fmt.Errorf("split: the mount's dtype %s is not the servers' %s", cfg.Local.DType(), c.info.DType)
	}
	bw, _, err := x.probe(ctx, cfg.ProbeBytes)
	if err != nil {
		return nil, fmt.Errorf("split: bandwidth probe: %w", err)
	}
	for _, m := range c.set.Load().models {
		lm, ok := cfg.Local.Model(m.Name)
		if !ok || lm.Digest != m.Digest {
			cfg.Logger.Warn("featurefs: no local copy of the servers' model; it is not split", slog.String("model", m.Name))
			continue
		}
		if lm.Preprocess.Key() != m.Preprocess.Key() {
			// Raw images decoded here must become the servers' features.
			cfg.Logger.Warn("featurefs: the mount's preprocessing (--fast-decode, config file) differs from the servers'; the model is not split",
				slog.String("model", m.Name), slog.String("local", lm.Preprocess.Key()), slog.String("servers", m.Preprocess.Key()))
			continue
		}
		sp, err := c.serverProfile(ctx, m.Name, cfg.ProfileTimeout)
		if err != nil {
			return nil, fmt.Errorf("split: server profile of %s: %w", m.Name, err)
		}
		lp, err := cfg.Local.Profile(ctx, m.Name, api.ProfileOptions{Dir: cfg.ProfileDir})
		if err != nil {
			return nil, fmt.Errorf("split: local profile of %s: %w", m.Name, err)
		}
		// The local profile is shared (cached): the CPU per byte
		// received goes on a copy.
		local := *lp
		local.ByteSeconds = x.recvCost.seconds()
		lp = &local
		cm, err := split.NewCostModel(sp, lp)
		if err != nil {
			return nil, fmt.Errorf("split: model %s: %w", m.Name, err)
		}
		cm.RawBytes = cfg.RawBytes
		cm.ElemBytes = c.info.DType.Size()
		cm.Compressed = slices.Contains(c.info.Encodings, EncodingFFZ1)
		p, err := split.NewPlanner(cm, cfg.Policy, bw)
		if err != nil {
			return nil, err
		}
		x.planners[m.Name] = p
		cfg.Logger.Info("featurefs: split execution", slog.String("model", m.Name), slog.String("policy", cfg.Policy.String()),
			slog.Float64("bandwidth_mbit", bw*8/1e6), slog.Bool("shared_compute", cm.SharedCompute),
			slog.Float64("server_ms_per_sample", sp.Layers[len(sp.Layers)-1].CumSeconds*1000),
			slog.Float64("local_ms_per_sample", lp.Layers[len(lp.Layers)-1].CumSeconds*1000),
			slog.Float64("server_ns_per_byte", sp.ByteSeconds*1e9), slog.Float64("local_ns_per_byte", lp.ByteSeconds*1e9))
	}
	x.owner.Go(func() { x.reprobe(cfg.ProbeEvery, cfg.ProbeBytes) })
	if cfg.Policy.Mode == "auto" && cfg.CalibrateEvery > 0 && len(x.planners) > 0 {
		x.owner.Go(func() { x.calibrate(cfg.CalibrateEvery) })
	}
	return x, nil
}

// serverProfile gets GET /v1/profile?model=M from the first server, within
// total; the server must not stay silent (no byte, no heartbeat) for the
// client's Timeout.
func (c *Client) serverProfile(ctx context.Context, model string, total time.Duration) (*split.Profile, error) {
	u := c.servers[0].url
	ctx, cancel := context.WithTimeout(ctx, total)
	defer cancel()
	body, done, err := c.openWatched(ctx, u, "/v1/profile?"+url.Values{"model": {model}}.Encode(), model)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(body, 64<<20))
	if err = done(err); err != nil {
		return nil, err
	}
	// An error after the heartbeats started comes in the 200 answer.
	var e ErrorResponse
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		return nil, ErrorOf(e.Status, e.Error, u, model)
	}
	var p split.Profile
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("%s: profile of %s: %w", u, model, err)
	}
	return &p, nil
}

// Close stops the periodic bandwidth probes (a probe in flight is
// cancelled) and waits for them. Closing the client stops them too.
func (x *SplitExtractor) Close() error {
	x.owner.Close()
	return nil
}

// Planner returns the split planner of a model (nil: not split).
func (x *SplitExtractor) Planner(model string) *split.Planner { return x.planners[model] }

// probeMinTime and probeMaxBytes size a bandwidth probe: one that took
// less than probeMinTime is repeated with as many bytes as would take
// about twice that at the rate it saw, at most probeMaxBytes.
const (
	probeMinTime  = 50 * time.Millisecond
	probeMaxBytes = 16 << 20
)

// probe measures the bandwidth from the first server with GET /v1/probe of
// n bytes, or more where n passed too fast to measure; it returns bytes
// per second and the size of the probe that counted.
//
// A shaper's token bucket or a queue lets the first bytes of a transfer
// through at once: on the test bed's 1000 Mbit/s link (a 500 KB burst) a
// 1 MiB probe timed whole read 1731 Mbit/s, and the planner sent a 700 KB
// tensor per sample where the image was 2x faster. So the rate is that of
// the probe's second half, and a probe shorter than probeMinTime is
// repeated, larger.
func (x *SplitExtractor) probe(ctx context.Context, n int64) (float64, int64, error) {
	for {
		bw, d, err := x.probeOnce(ctx, n)
		if err != nil {
			return 0, n, err
		}
		next := min(probeMaxBytes, int64(bw*2*probeMinTime.Seconds()))
		if d >= probeMinTime || next <= n {
			return bw, n, nil
		}
		n = next
	}
}

// probeOnce reads n bytes of GET /v1/probe and returns the rate over the
// second half of them, plus what other transfers received meanwhile, and
// the time from the first byte to the last.
func (x *SplitExtractor) probeOnce(ctx context.Context, n int64) (float64, time.Duration, error) {
	// Its CPU on both sides is not a sample's (calibrate).
	x.probes.Add(1)
	defer x.probes.Add(1)
	c := x.c
	u := c.servers[0].url
	body, done, err := c.openWatched(ctx, u, "/v1/probe?bytes="+fmt.Sprint(n), "probe")
	if err != nil {
		return 0, 0, err
	}
	// Time from the first byte, so that the request's round trip does not
	// count as transfer time.
	var first [1]byte
	if _, err := io.ReadFull(body, first[:]); err != nil {
		return 0, 0, done(err)
	}
	t0, cpu := time.Now(), processCPU()
	half := max(0, n/2-1)
	got, err := io.CopyN(io.Discard, body, half)
	t1 := time.Now()
	before := x.received.Load()
	var rest int64
	if err == nil {
		rest, err = io.Copy(io.Discard, body)
	}
	t2 := time.Now()
	if err := done(err); err != nil {
		return 0, 0, err
	}
	d := t2.Sub(t1)
	if d <= 0 || got+rest < n-1 || rest <= 0 {
		return 0, 0, fmt.Errorf("probe: %d of %d bytes", got+rest, n-1)
	}
	x.recvCost.observe(got+rest, processCPU()-cpu)
	others := x.received.Load() - before
	return float64(rest+others) / d.Seconds(), t2.Sub(t0), nil
}

// reprobe measures the bandwidth again every period and feeds the planners.
func (x *SplitExtractor) reprobe(period time.Duration, n int64) {
	ctx := x.owner.Context()
	tk := time.NewTicker(period)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		// Each probe starts at n bytes: one sized for a fast link would
		// take seconds once the link slows down.
		bw, size, err := x.probe(ctx, n)
		if err != nil {
			x.log.Debug("featurefs: bandwidth probe failed", slog.Any("err", err))
			continue
		}
		for name, p := range x.planners {
			if p.ObserveTransfer(size, time.Duration(float64(size)/bw*float64(time.Second))) {
				st := p.Stats()
				x.log.Info("featurefs: bandwidth changed; split re-planned", slog.String("model", name),
					slog.Float64("bandwidth_mbit", st.PlannedBandwidthBps*8/1e6), slog.Int("replans", st.Replans))
			}
		}
	}
}

// Models returns the servers' models.
func (x *SplitExtractor) Models() []*api.Model { return x.inner.Models() }

// Model returns the model called name.
func (x *SplitExtractor) Model(name string) (*api.Model, bool) { return x.inner.Model(name) }

// DType is the servers' element type.
func (x *SplitExtractor) DType() api.DType { return x.inner.DType() }

// Device names the servers and the local device.
func (x *SplitExtractor) Device() string {
	if x.local == nil {
		return x.inner.Device()
	}
	return x.inner.Device() + "+" + x.local.Device()
}

// Stats returns the remote figures with the split plans (the first model's
// planner; every model's through Planner).
func (x *SplitExtractor) Stats() api.Stats {
	st := x.inner.Stats()
	st.Device = x.Device()
	for _, m := range x.c.set.Load().models {
		if p := x.planners[m.Name]; p != nil {
			ps := p.Stats()
			st.Split = &ps
			break
		}
	}
	return st
}

// ObserveListing records the sizes of listed objects: the mean image size
// of the raw candidate. A size past MaxObjectSize (an image split raw
// could not fetch; or a server's number that would overflow the sum) is
// not counted.
func (x *SplitExtractor) ObserveListing(objs []bucket.Object) {
	for _, o := range objs {
		if o.Size > 0 && o.Size <= x.maxRaw {
			x.rawSum.Add(o.Size)
			x.rawN.Add(1)
		}
	}
}

// Extract returns layer req.Layer of req.Key's object, computed as the
// model's planner says: all on the server, split, or all on the mount.
//
// Never two versions in one feature: req is pinned to the servers' version
// it was made for (req.Digest, or the current one), and the mount computes
// part of it only when its own model's digest of layer req.Layer is that
// version's (the graph up to the layer, its weights and preprocessing are
// the same), pinned to that local version for the whole computation.
// Otherwise (a model file replaced on one side only, or a local version
// gone mid-read) the servers compute the whole layer.
func (x *SplitExtractor) Extract(ctx context.Context, req api.Request) ([]byte, error) {
	p := x.planners[req.Model]
	if p == nil {
		data, err := x.inner.Extract(ctx, req)
		x.received.Add(int64(len(data)))
		return data, err
	}
	freeze := req.Layer
	if n := x.rawN.Load(); n > 0 {
		p.SetRawBytes(float64(x.rawSum.Load()) / float64(n))
	}
	split, compressed := p.Plan(freeze)
	planned := split
	var local string // the local version computing part of the feature
	if split != freeze {
		sm, err := x.c.set.Load().version(req)
		if err != nil {
			return nil, err
		}
		// Every request below names the servers' version resolved here: a
		// refresh meanwhile cannot move it to another one.
		req.Digest = sm.Digest
		if local = x.agree(sm, freeze); local == "" {
			split = freeze
		}
	}
	var data []byte
	var wire int64
	var err error
	switch {
	case split == freeze:
	case split == spec.SplitRaw:
		var img []byte
		img, err = x.object(ctx, req.Key, req.ETag)
		if err == nil {
			wire = int64(len(img))
			lreq := req
			lreq.Digest = local
			lreq.Fetch = func(context.Context) ([]byte, error) { return img, nil }
			data, err = x.local.Extract(ctx, lreq)
		}
	default:
		sreq := req
		sreq.Layer = split
		var mid []byte
		var n int
		// Not stored by the server (the mount stores layer freeze), and
		// compressed only where the plan found it pays.
		mid, n, err = x.inner.extractWire(ctx, sreq, itemOpts{transient: true, plain: !compressed})
		wire = int64(n)
		if err == nil {
			data, err = x.local.ExtractFromVersion(ctx, req.Model, local, split, freeze, mid)
			if errors.Is(err, api.ErrBadTensor) {
				err = fmt.Errorf("%s: the server's %s: %w", req.Key, spec.SplitName(split), err)
			}
		}
	}
	if split != freeze && errors.Is(err, api.ErrModelReplaced) && ctx.Err() == nil {
		// The local version was replaced twice during the read: the
		// servers compute it all.
		x.received.Add(wire)
		split = freeze
	}
	if split == freeze {
		var n int
		// Plain only where the plan chose the whole layer plain (not a
		// split that fell back to it).
		data, n, err = x.inner.extractWire(ctx, req, itemOpts{plain: planned == freeze && !compressed})
		wire = int64(n)
	}
	x.received.Add(wire)
	if err == nil {
		// How it came: a split as planned, or the whole layer (plain only
		// where planned so).
		z := compressed
		if split != planned {
			z = split != spec.SplitRaw
		}
		p.ObserveSamples(freeze, split, z, 1, wire)
	}
	return data, err
}

// agree returns the digest of the local version of model sm whose layer
// layer is sm's (the same computation up to it), or "" when the local
// model differs there (logged once per pair of versions).
func (x *SplitExtractor) agree(sm *api.Model, layer int) string {
	lm, ok := x.local.Model(sm.Name)
	if ok && layer < len(lm.Layers) && layer < len(sm.Layers) && lm.Layers[layer].Digest != "" &&
		lm.Layers[layer].Digest == sm.Layers[layer].Digest {
		return lm.Digest
	}
	ld := ""
	if ok {
		ld = lm.Digest
	}
	x.warnMu.Lock()
	pair := ld + " " + sm.Digest
	first := x.warned[sm.Name] != pair
	x.warned[sm.Name] = pair
	x.warnMu.Unlock()
	if first {
		x.log.Warn("featurefs: the mount's model file and the servers' differ at a layer read; the servers compute it whole (not split) until both sides hold the same version",
			slog.String("model", sm.Name), slog.Int("layer", layer), slog.String("local_digest", ld), slog.String("servers_digest", sm.Digest))
	}
	return ""
}

// Replan tells split execution that model's version changed on one side
// (the mount's file reloaded, or the servers' refreshed): it logs which of
// the model's layers the mount can now compute part of (those whose digest
// both sides share). The check itself is made on every read (Extract), so a
// read never waits for this.
func (x *SplitExtractor) Replan(model string) {
	if x.planners[model] == nil {
		return
	}
	sm, ok := x.inner.Model(model)
	lm, lok := x.local.Model(model)
	if !ok || !lok {
		return
	}
	same := 0
	for i := range min(len(sm.Layers), len(lm.Layers)) {
		if sm.Layers[i].Digest != "" && sm.Layers[i].Digest == lm.Layers[i].Digest {
			same++
		}
	}
	x.log.Info("featurefs: split execution follows a model version", slog.String("model", model),
		slog.String("local_digest", lm.Digest), slog.String("servers_digest", sm.Digest),
		slog.Int("split_layers", same), slog.Int("layers", len(sm.Layers)))
}

// object fetches an object's bytes with GET /v1/object (split raw), at
// most MaxObjectSize of them.
func (x *SplitExtractor) object(ctx context.Context, key, etag string) ([]byte, error) {
	select {
	case x.rawSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-x.rawSem }()
	c := x.c
	u := c.route(key).url
	q := url.Values{"key": {key}}
	if etag != "" {
		q.Set("etag", etag)
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, u+"/v1/object?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	c.authorize(req)
	c.n.httpRequests.Add(1)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.unavailable(u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, responseError(resp, u, key)
	}
	if resp.ContentLength > x.maxRaw {
		return nil, tooLarge(u, key, fmt.Sprintf("%d bytes, limit %d", resp.ContentLength, x.maxRaw))
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, x.maxRaw+1))
	if err != nil {
		return nil, c.unavailable(u, fmt.Errorf("reading %s: %w", key, err))
	}
	if int64(len(b)) > x.maxRaw {
		return nil, tooLarge(u, key, fmt.Sprintf("more than %d bytes", x.maxRaw))
	}
	return b, nil
}

// tooLarge is the error of an object larger than MaxObjectSize; size says
// how large.
func tooLarge(u, key, size string) error {
	return fmt.Errorf("%s: object %q: %s (--max-object-size): %w", u, key, size, bucket.ErrTooLarge)
}

// Bucket wraps b so that its listings tell the planners the mean image size.
func (x *SplitExtractor) Bucket(b bucket.Bucket) bucket.Bucket { return &sizeBucket{Bucket: b, x: x} }

// sizeBucket records listed image sizes.
type sizeBucket struct {
	bucket.Bucket
	x *SplitExtractor
}

// List lists through the wrapped bucket and records the image sizes.
func (b *sizeBucket) List(ctx context.Context, prefix, token string) (bucket.Page, error) {
	p, err := b.Bucket.List(ctx, prefix, token)
	if err == nil {
		var imgs []bucket.Object
		for _, o := range p.Objects {
			if spec.IsImage(path.Base(o.Key), b.x.exts) {
				imgs = append(imgs, o)
			}
		}
		b.x.ObserveListing(imgs)
	}
	return p, err
}
