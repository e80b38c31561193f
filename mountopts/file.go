package mountopts

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/featurefs/featurefs/extractor/spec"
)

// fileModel is one entry of the config file's models: map.
type fileModel struct {
	Path       string            `yaml:"path"`
	Preprocess *filePreprocess   `yaml:"preprocess"`
	Aliases    map[string]string `yaml:"aliases"`
	// PrefetchLimit overrides prefetch-limit for this model.
	PrefetchLimit *int `yaml:"prefetch-limit"`
}

// filePreprocess overrides part of the default preprocessing; fields left
// out keep DefaultPreprocess's values.
type filePreprocess struct {
	Resize *int        `yaml:"resize"`
	Crop   *int        `yaml:"crop"`
	Mean   *[3]float32 `yaml:"mean"`
	Std    *[3]float32 `yaml:"std"`
}

// fileOptions is the config file. A nil field was not given and leaves the
// option as it was.
type fileOptions struct {
	Models           map[string]fileModel `yaml:"models"`
	EndpointURL      *string              `yaml:"endpoint-url"`
	Region           *string              `yaml:"region"`
	Profile          *string              `yaml:"profile"`
	CacheDir         *string              `yaml:"cache-dir"`
	FeatureStore     *string              `yaml:"feature-store"`
	FSEndpointURL    *string              `yaml:"feature-store-endpoint-url"`
	FSProfile        *string              `yaml:"feature-store-profile"`
	FeatureStoreOnly *bool                `yaml:"feature-store-only"`
	CacheSize        *string              `yaml:"cache-size"`
	CacheCompression *string              `yaml:"cache-compression"`
	FSCompression    *string              `yaml:"feature-store-compression"`
	Device           *string              `yaml:"device"`
	TensorRT         *bool                `yaml:"tensorrt"`
	CPUFallback      *bool                `yaml:"allow-cpu-fallback"`
	Precision        *string              `yaml:"precision"`
	CUDALibDir       *string              `yaml:"cuda-lib-dir"`
	DType            *string              `yaml:"dtype"`
	BatchSize        *int                 `yaml:"batch-size"`
	MetadataTTL      *string              `yaml:"metadata-ttl"`
	NegativeTTL      *string              `yaml:"negative-ttl"`
	ReadTimeout      *string              `yaml:"read-timeout"`
	AllowOther       *bool                `yaml:"allow-other"`
	AllowNonempty    *bool                `yaml:"allow-nonempty"`
	Foreground       *bool                `yaml:"foreground"`
	LogLevel         *string              `yaml:"log-level"`
	LogFile          *string              `yaml:"log-file"`
	MetricsAddr      *string              `yaml:"metrics-addr"`
	ORTLib           *string              `yaml:"ort-lib"`
	ImageExtensions  []string             `yaml:"image-extensions"`
	MaxPixels        *int64               `yaml:"max-pixels"`
	MaxObjectSize    *string              `yaml:"max-object-size"`
	DecodeMemory     *string              `yaml:"decode-memory"`
	FastDecode       *bool                `yaml:"fast-decode"`
	Prefetch         *string              `yaml:"prefetch"`
	PrefetchLimit    *int                 `yaml:"prefetch-limit"`
	ShowEmptyDirs    *bool                `yaml:"show-empty-dirs"`
}

// LoadFile applies the YAML config file at path on top of o and records it
// in ConfigFile. Unknown keys are an error (a misspelt option must not be
// ignored silently) that names the key and lists the valid ones. Relative
// model paths are taken relative to the file's directory. Models in the
// file replace models of the same name in o.
func (o *Options) LoadFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	var f fileOptions
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("--config %s: %w", path, explainFileError(err))
	}
	if err := o.apply(&f, filepath.Dir(path)); err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	o.ConfigFile = path
	return nil
}

// apply copies the given fields of f onto o.
func (o *Options) apply(f *fileOptions, dir string) error {
	names := make([]string, 0, len(f.Models))
	for name := range f.Models {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		m := f.Models[name]
		ms := spec.ModelSpec{Name: name, Path: m.Path, Aliases: m.Aliases}
		if m.PrefetchLimit != nil {
			if o.ModelPrefetchLimits == nil {
				o.ModelPrefetchLimits = map[string]int{}
			}
			o.ModelPrefetchLimits[name] = *m.PrefetchLimit
		}
		if ms.Path != "" && !filepath.IsAbs(ms.Path) {
			ms.Path = filepath.Join(dir, ms.Path)
		}
		if pp := m.Preprocess; pp != nil {
			p := spec.DefaultPreprocess()
			if pp.Resize != nil {
				p.Resize = *pp.Resize
			}
			if pp.Crop != nil {
				p.Crop = *pp.Crop
			}
			if pp.Mean != nil {
				p.Mean = *pp.Mean
			}
			if pp.Std != nil {
				p.Std = *pp.Std
			}
			ms.Preprocess = &p
		}
		replaced := false
		for i := range o.Models {
			if o.Models[i].Name == name {
				o.Models[i], replaced = ms, true
			}
		}
		if !replaced {
			o.Models = append(o.Models, ms)
		}
	}
	setStr := func(dst *string, src *string) {
		if src != nil {
			*dst = *src
		}
	}
	setBool := func(dst *bool, src *bool) {
		if src != nil {
			*dst = *src
		}
	}
	setStr(&o.EndpointURL, f.EndpointURL)
	setStr(&o.FeatureStore, f.FeatureStore)
	setStr(&o.FeatureStoreEndpointURL, f.FSEndpointURL)
	setStr(&o.FeatureStoreProfile, f.FSProfile)
	setBool(&o.FeatureStoreOnly, f.FeatureStoreOnly)
	setStr(&o.Region, f.Region)
	setStr(&o.Profile, f.Profile)
	setStr(&o.CacheDir, f.CacheDir)
	setStr(&o.CacheCompression, f.CacheCompression)
	setStr(&o.FeatureStoreCompression, f.FSCompression)
	setStr(&o.Device, f.Device)
	setStr(&o.LogLevel, f.LogLevel)
	setStr(&o.LogFile, f.LogFile)
	setStr(&o.MetricsAddr, f.MetricsAddr)
	setStr(&o.ORTLib, f.ORTLib)
	setStr(&o.CUDALibDir, f.CUDALibDir)
	if f.Precision != nil {
		o.Precision = spec.Precision(*f.Precision)
	}
	setStr(&o.Prefetch, f.Prefetch)
	if f.PrefetchLimit != nil {
		o.PrefetchLimit = *f.PrefetchLimit
	}
	setBool(&o.TensorRT, f.TensorRT)
	setBool(&o.AllowCPUFallback, f.CPUFallback)
	setBool(&o.AllowOther, f.AllowOther)
	setBool(&o.ShowEmptyDirs, f.ShowEmptyDirs)
	setBool(&o.AllowNonempty, f.AllowNonempty)
	setBool(&o.Foreground, f.Foreground)
	setBool(&o.FastDecode, f.FastDecode)
	if f.DType != nil {
		o.DType = spec.DType(*f.DType)
	}
	if f.BatchSize != nil {
		o.BatchSize = *f.BatchSize
	}
	if f.MaxPixels != nil {
		o.MaxPixels = *f.MaxPixels
	}
	for _, s := range []struct {
		key string
		src *string
		dst *int64
	}{{"cache-size", f.CacheSize, &o.CacheSize}, {"max-object-size", f.MaxObjectSize, &o.MaxObjectSize},
		{"decode-memory", f.DecodeMemory, &o.DecodeMemory}} {
		if s.src == nil {
			continue
		}
		n, err := ParseSize(*s.src)
		if err != nil {
			return fmt.Errorf("%s: %w", s.key, err)
		}
		*s.dst = n
	}
	for _, d := range []struct {
		key string
		src *string
		dst *time.Duration
	}{{"metadata-ttl", f.MetadataTTL, &o.MetadataTTL}, {"negative-ttl", f.NegativeTTL, &o.NegativeTTL}, {"read-timeout", f.ReadTimeout, &o.ReadTimeout}} {
		if d.src == nil {
			continue
		}
		v, err := time.ParseDuration(*d.src)
		if err != nil {
			return fmt.Errorf("%s: %w (want e.g. 90s, 5m, 1h)", d.key, err)
		}
		*d.dst = v
	}
	if f.ImageExtensions != nil {
		if err := o.SetImageExtensions(strings.Join(f.ImageExtensions, ",")); err != nil {
			return fmt.Errorf("image-extensions: %w", err)
		}
	}
	return nil
}
