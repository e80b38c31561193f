package remote

// The server's endpoints for split execution (docs/SPLIT.md):
//
//	GET /v1/profile?model=M   the server's compute profile of M (JSON split.Profile)
//	GET /v1/probe?bytes=N     N bytes of filler, to measure the bandwidth
//	GET /v1/object?key=K      the object's bytes (split "raw": the mount extracts;
//	                          an archive's sidecar: the mount shows it)
//	GET /v1/load              the process's CPU time and samples served (JSON
//	                          Load: a split mount's calibration)

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"strconv"
	"sync"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/extractor/split"
	"github.com/featurefs/featurefs/fs/features"
)

// MaxProbeBytes bounds GET /v1/probe.
const MaxProbeBytes = 64 << 20

// profiler is what the server's extractor offers for GET /v1/profile
// (*extractor.Service implements it).
type profiler interface {
	Profile(ctx context.Context, model string, opts api.ProfileOptions) (*split.Profile, error)
}

// registerSplit adds the split endpoints to the server's mux.
func (s *Server) registerSplit() {
	s.handle("GET", "/v1/profile", s.handleProfile)
	s.handle("GET", "/v1/probe", s.handleProbe)
	s.handle("GET", "/v1/object", s.handleObject)
	s.handle("GET", "/v1/load", s.handleLoad)
}

// Load is GET /v1/load's answer: what a --split auto mount divides, one
// reading by the next, to learn what a sample costs this server
// (calibrate.go). Cheap to answer: GET /v1/stats (the pipeline's
// figures), read every 250 ms instead, cost the test bed's storage side
// 4.7-4.8 ms of CPU per sample where the same split fixed cost 4.1-4.2
// (MobileNetV3 at 210-240 samples/s), and auto delivered 0.90x of it.
type Load struct {
	// CPUSeconds is the process's CPU time so far (user and system).
	CPUSeconds float64 `json:"cpu_seconds"`
	// Samples counts batch items answered and images sent whole
	// (ServerStats Items plus Objects).
	Samples int64 `json:"samples"`
	// Process names the process (its host's boot id and its pid): a
	// mount that is that process cannot tell its own CPU time from the
	// server's, and does not calibrate by them.
	Process string `json:"process"`
}

func (s *Server) handleLoad(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, Load{CPUSeconds: processCPU().Seconds(), Samples: s.n.items.Load() + s.n.objects.Load(), Process: processName()})
}

// handleProfile answers the server's compute profile of a model. Measuring
// it takes seconds to minutes on a CPU, so while it runs the answer (status
// 200, JSON) is started and a space is sent every Heartbeat: the client's
// silence timeout measures the server's liveness, not the measurement (JSON
// allows leading white space). An error after that is a JSON ErrorResponse
// in the 200 answer's body.
func (s *Server) handleProfile(w http.ResponseWriter, r *http.Request) {
	p, ok := s.ex.(profiler)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Errorf("this server's extractor has no compute profile"))
		return
	}
	model := r.URL.Query().Get("model")
	if _, ok := s.ex.Model(model); !ok {
		writeError(w, http.StatusNotFound, fmt.Errorf("%w %s", api.ErrUnknownModel, echo(model)))
		return
	}
	dir := s.cfg.ProfileDir
	if dir == "" {
		dir = spec.DefaultProfileDir()
	}
	type result struct {
		prof *split.Profile
		err  error
	}
	done := make(chan result, 1)
	ctx, cancel := s.owner.Detach(r.Context())
	defer cancel()
	stop := context.AfterFunc(r.Context(), cancel) // the measurement ends with the request
	defer stop()
	if !s.owner.Go(func() {
		// One measurement at a time, under the compute bound.
		select {
		case s.sem <- struct{}{}:
		case <-ctx.Done():
			done <- result{err: ctx.Err()}
			return
		}
		prof, err := p.Profile(ctx, model, api.ProfileOptions{Dir: dir})
		<-s.sem
		done <- result{prof, err}
	}) {
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("profile of %s: the server is closing", model))
		return
	}
	// The answer starts soon (a cached profile answers at once), then a
	// heartbeat follows every Heartbeat.
	hb := time.NewTicker(min(s.cfg.Heartbeat, 100*time.Millisecond))
	defer hb.Stop()
	rc := http.NewResponseController(w)
	started := false
	for {
		select {
		case res := <-done:
			if res.err != nil {
				s.log.Warn("featurefs serve: profile failed", slog.String("model", model), slog.Any("err", res.err))
			}
			switch {
			case res.err == nil:
				// The profile is the model's; the CPU per byte sent is
				// of the link, measured by the client's probes.
				prof := *res.prof
				prof.ByteSeconds = s.sendCost.seconds()
				writeJSON(w, &prof)
			case !started:
				writeError(w, http.StatusInternalServerError, s.public(model, res.err))
			default:
				json.NewEncoder(w).Encode(ErrorResponse{Error: s.public(model, res.err).Error(), Status: http.StatusInternalServerError})
			}
			return
		case <-hb.C:
			if !started {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusOK)
				started = true
				hb.Reset(s.cfg.Heartbeat)
			}
			if _, err := w.Write([]byte(" ")); err != nil {
				return // the client left; the measurement ends with its context
			}
			rc.Flush()
			s.n.heartbeats.Add(1)
		}
	}
}

// probeFiller is the random bytes GET /v1/probe sends, made once.
var probeFiller = sync.OnceValue(func() []byte {
	b := make([]byte, 256<<10)
	rand.Read(b)
	return b
})

func (s *Server) handleProbe(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.ParseInt(r.URL.Query().Get("bytes"), 10, 64)
	if err != nil || n < 0 || n > MaxProbeBytes {
		writeError(w, StatusBadRequest, fmt.Errorf("bytes %s: want 0..%d", echo(r.URL.Query().Get("bytes")), MaxProbeBytes))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	// Random bytes (nothing on the path can compress them), one buffer
	// for every request.
	buf := probeFiller()
	total, cpu := n, processCPU()
	for n > 0 {
		k := min(n, int64(len(buf)))
		if _, err := w.Write(buf[:k]); err != nil {
			return
		}
		n -= k
	}
	s.sendCost.observe(total, processCPU()-cpu)
}

func (s *Server) handleObject(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if err := checkKey(key); err != nil {
		writeError(w, StatusBadRequest, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.itemTimeout)
	defer cancel()
	if !spec.IsImage(path.Base(key), s.imageExts) {
		// An archive's sidecar (bucket.Object.Plain) is sent too.
		if o, err := s.bucket.Stat(ctx, key); err != nil || !o.Plain {
			writeError(w, StatusOf(features.ErrNotImage), fmt.Errorf("object %s: %w", key, features.ErrNotImage))
			return
		}
	}
	data, obj, err := s.bucket.Get(ctx, key, s.maxObjectSize)
	if err != nil {
		s.logItemError("object", key, err)
		writeError(w, StatusOf(err), s.public(key, err))
		return
	}
	// Counted once read (its size is known only then).
	held, err := s.buffered.acquire(r.Context(), int64(len(data)))
	if err != nil {
		writeError(w, StatusOf(err), s.public(key, err))
		return
	}
	defer s.buffered.release(held)
	if etag := r.URL.Query().Get("etag"); etag != "" && obj.ETag != "" && etag != obj.ETag {
		writeError(w, StatusChanged, fmt.Errorf("%s: %w", key, features.ErrObjectChanged))
		return
	}
	s.n.bytesOut.Add(int64(len(data)))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	if _, err := w.Write(data); err == nil {
		s.n.objects.Add(1)
	}
}
