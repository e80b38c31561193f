package split

// Compute profiles: the time per sample of every layer segment of a model on
// one device, the cost model's input. Package extractor measures them
// (Service.Profile); they are saved as JSON and sent between the server and
// the mount (GET /v1/profile).

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ProfileSchema is bumped when Profile's meaning changes; older files are
// measured again.
const ProfileSchema = 2 // 2: LayerProfile.WireRatio

// Profile is the measured compute cost of one model on one device.
type Profile struct {
	// Schema is ProfileSchema of the code that wrote it.
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
	// WireRatio is how much smaller the layer's output gets compressed for
	// the wire (cache/codec, S2, as float32) on the profiling image; 0 when
	// not measured (a profile written before it), which counts as 1.
	WireRatio float64 `json:"wire_ratio,omitempty"`
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
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
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
