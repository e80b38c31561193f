package extractor

// Compute profiles: the time per sample of every layer segment of a model on
// this Service's device, measured once and cached on disk (JSON keyed by the
// model digest, the device and the thread count), for the split cost model.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// profileSchema is bumped when Profile's meaning changes; older files are
// measured again.
const profileSchema = 1

// Profile is the measured compute cost of one model on one device.
type Profile struct {
	// Schema is profileSchema of the code that wrote it.
	Schema int `json:"schema"`
	// Model and Digest identify the model (Digest is the ONNX bytes' sha256).
	Model  string `json:"model"`
	Digest string `json:"digest"`
	// Device is where it ran: "cpu" or "cuda:N".
	Device string `json:"device"`
	// Host identifies the machine (its boot id): two profiles with the same
	// Host and a CPU device share processors.
	Host string `json:"host"`
	// Threads is the intra-op thread count, Batch the batch size timed.
	Threads int `json:"threads"`
	Batch   int `json:"batch"`
	// Created is when it was measured.
	Created time.Time `json:"created"`
	// DecodeSeconds is the time to decode and preprocess one image (a
	// 500x375 JPEG, ImageNet's typical size).
	DecodeSeconds float64 `json:"decode_seconds"`
	// WeightBytes is the size of the ONNX file.
	WeightBytes int64 `json:"weight_bytes"`
	// FreeMemory is the free GPU memory when measured (0 on the CPU: not
	// the limit).
	FreeMemory int64 `json:"free_memory"`
	// Layers holds one entry per layer, by index.
	Layers []LayerProfile `json:"layers"`
}

// LayerProfile is the cost of one layer.
type LayerProfile struct {
	// Index and Tensor name the layer.
	Index  int    `json:"index"`
	Tensor string `json:"tensor"`
	// Bytes is the per-sample output size as float32.
	Bytes int64 `json:"bytes"`
	// ActBytes bounds the per-sample activation memory from the input up to
	// this layer.
	ActBytes int64 `json:"act_bytes"`
	// Seconds is the per-sample time of the segment from the previous layer
	// (the input for layer 0) to this one; CumSeconds sums them from the
	// input.
	Seconds    float64 `json:"seconds"`
	CumSeconds float64 `json:"cum_seconds"`
}

// ProfileOptions tune a measurement.
type ProfileOptions struct {
	// Dir caches profiles as JSON files; empty means no disk cache.
	Dir string
	// Batch is the batch size timed (default: Config.BatchSize, else 4).
	Batch int
	// Runs is how many timed runs per segment (the fastest counts; default 2).
	Runs int
}

// profileState caches profiles in memory (one per model); its zero value
// is ready for use.
type profileState struct {
	mu   sync.Mutex
	byID map[string]*Profile // GUARDED_BY(mu); bounded by the number of models
	busy sync.Mutex          // serializes measurements
}

// Profile returns the compute profile of model on this Service's device:
// from memory, else from opts.Dir, else measured (then saved to opts.Dir).
// Measuring runs one batch through every layer segment in turn.
func (s *Service) Profile(ctx context.Context, model string, opts ProfileOptions) (*Profile, error) {
	m, ok := s.models[model]
	if !ok {
		return nil, fmt.Errorf("profile: %w %q", ErrUnknownModel, model)
	}
	if opts.Batch <= 0 {
		opts.Batch = s.cfg.BatchSize
		if opts.Batch <= 0 {
			opts.Batch = 4
		}
	}
	if opts.Runs <= 0 {
		opts.Runs = 2
	}
	id := fmt.Sprintf("%s-%s-t%d-b%d", m.Digest[:16], strings.ReplaceAll(s.Device(), ":", ""), s.cfg.IntraOpThreads, opts.Batch)
	ps := &s.prof
	ps.mu.Lock()
	if p := ps.byID[id]; p != nil {
		ps.mu.Unlock()
		return p, nil
	}
	ps.mu.Unlock()

	ps.busy.Lock()
	defer ps.busy.Unlock()
	ps.mu.Lock()
	p := ps.byID[id]
	ps.mu.Unlock()
	if p != nil {
		return p, nil
	}
	file := ""
	if opts.Dir != "" {
		file = filepath.Join(opts.Dir, "profile-"+id+".json")
		if p, err := LoadProfile(file); err == nil && p.Digest == m.Digest && p.Schema == profileSchema && len(p.Layers) == len(m.Layers) {
			s.remember(id, p)
			return p, nil
		} else if err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("profile cache unreadable; measuring again", "model", m.Name, "file", file, "err", err)
		}
	}
	t := time.Now()
	p, err := s.measureProfile(ctx, m, opts)
	if err != nil {
		return nil, err
	}
	s.log.Info("model profiled", "model", m.Name, "device", p.Device, "batch", p.Batch, "took", time.Since(t).Round(time.Millisecond),
		"ms_per_sample", p.Layers[len(p.Layers)-1].CumSeconds*1000, "decode_ms", p.DecodeSeconds*1000)
	if file != "" {
		if err := SaveProfile(file, p); err != nil {
			s.log.Warn("cannot cache profile", "model", m.Name, "file", file, "err", err)
		}
	}
	s.remember(id, p)
	return p, nil
}

func (s *Service) remember(id string, p *Profile) {
	s.prof.mu.Lock()
	if s.prof.byID == nil {
		s.prof.byID = map[string]*Profile{}
	}
	s.prof.byID[id] = p
	s.prof.mu.Unlock()
}

// measureProfile times every segment of m: layer k-1 -> k, feeding each the
// previous one's output, starting from a synthetic preprocessed image.
func (s *Service) measureProfile(ctx context.Context, m *Model, opts ProfileOptions) (*Profile, error) {
	p := &Profile{
		Schema:      profileSchema,
		Model:       m.Name,
		Digest:      m.Digest,
		Device:      s.Device(),
		Host:        HostID(),
		Threads:     s.cfg.IntraOpThreads,
		Batch:       opts.Batch,
		Created:     time.Now().UTC(),
		WeightBytes: m.weight,
	}
	if s.dev.gpu {
		p.FreeMemory = int64(s.dev.free)
	}
	img := syntheticJPEG(500, 375)
	one := make([]float32, m.inputElems())
	var dec time.Duration
	for i := range 3 {
		t := time.Now()
		if err := ApplyPreprocess(m.Preprocess, img, s.cfg.MaxPixels, one); err != nil {
			return nil, fmt.Errorf("profile %s: preprocess: %w", m.Name, err)
		}
		if d := time.Since(t); i == 0 || d < dec {
			dec = d
		}
	}
	p.DecodeSeconds = dec.Seconds()

	b := opts.Batch
	in := make([]float32, 0, b*len(one))
	for range b {
		in = append(in, one...)
	}
	cum := 0.0
	for k, l := range m.Layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		out := make([]float32, b*int(l.Elements()))
		run := func() error {
			if k == 0 {
				return ortRunner{pool: s.pool}.run(ctx, m, l, b, in, out)
			}
			return s.runSegment(ctx, m, m.Layers[k-1], l, b, in, out)
		}
		// The first run pays for lazy allocations.
		if err := run(); err != nil {
			return nil, fmt.Errorf("profile %s %s: %w", m.Name, l.Name, err)
		}
		best := time.Duration(0)
		for r := range opts.Runs {
			t := time.Now()
			if err := run(); err != nil {
				return nil, fmt.Errorf("profile %s %s: %w", m.Name, l.Name, err)
			}
			if d := time.Since(t); r == 0 || d < best {
				best = d
			}
		}
		sec := best.Seconds() / float64(b)
		cum += sec
		p.Layers = append(p.Layers, LayerProfile{Index: k, Tensor: l.Tensor, Bytes: l.Bytes, ActBytes: m.actBytes[k], Seconds: sec, CumSeconds: cum})
		in = out
	}
	return p, nil
}

// LoadProfile reads a profile saved by SaveProfile.
func LoadProfile(file string) (*Profile, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var p Profile
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("profile %s: %w", file, err)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("profile %s: %w", file, err)
	}
	return &p, nil
}

// Validate checks that p is usable by the cost model: layers by index with
// non-negative, cumulative times.
func (p *Profile) Validate() error {
	if len(p.Layers) == 0 {
		return errors.New("profile has no layers")
	}
	cum := 0.0
	for i, l := range p.Layers {
		if l.Index != i || l.Seconds < 0 || l.Bytes <= 0 {
			return fmt.Errorf("profile layer %d: bad entry %+v", i, l)
		}
		cum += l.Seconds
		if d := l.CumSeconds - cum; d > 1e-9+1e-6*cum || d < -1e-9-1e-6*cum {
			return fmt.Errorf("profile layer %d: cumulative %g s is not the sum %g s", i, l.CumSeconds, cum)
		}
	}
	if p.DecodeSeconds < 0 {
		return fmt.Errorf("profile: negative decode time")
	}
	return nil
}

// SaveProfile writes p as JSON to file atomically (temporary file, rename).
func SaveProfile(file string, p *Profile) error {
	b, err := json.MarshalIndent(p, "", " ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), ".profile-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

// HostID identifies this machine: the kernel's boot id, else the host name.
func HostID() string {
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id
		}
	}
	h, _ := os.Hostname()
	return h
}

// syntheticJPEG encodes a w x h image with smooth gradients and texture, so
// that decoding costs about what a photograph of that size does.
func syntheticJPEG(w, h int) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	seed := uint32(1)
	for y := range h {
		for x := range w {
			seed = seed*1664525 + 1013904223
			n := uint8(seed >> 27)
			img.SetRGBA(x, y, color.RGBA{uint8(x*255/w) ^ n, uint8(y*255/h) + n, uint8((x+y)*3) ^ n, 255})
		}
	}
	var buf bytes.Buffer
	_ = jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90})
	return buf.Bytes()
}
