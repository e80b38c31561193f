package mountopts

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"

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

// fileType is the config file: a struct with a field per key of the
// option table (Option.Key), each a pointer, slice or map that stays nil
// when the key is not given. yaml.v3 decodes into it with known fields
// only, so an unknown key is an error.
var fileType = func() reflect.Type {
	var fields []reflect.StructField
	for i, opt := range table {
		if opt.Key != "" {
			fields = append(fields, reflect.StructField{
				Name: fmt.Sprintf("O%d", i),
				Type: opt.v.fileType(),
				Tag:  reflect.StructTag(`yaml:"` + opt.Key + `"`),
			})
		}
	}
	return reflect.StructOf(fields)
}()

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
	f := reflect.New(fileType)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(f.Interface()); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("--config %s: %w", path, explainFileError(err))
	}
	if err := o.apply(f.Elem(), filepath.Dir(path)); err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	o.ConfigFile = path
	return nil
}

// apply copies the keys given in f (a fileType) onto o, in the table's
// order.
func (o *Options) apply(f reflect.Value, dir string) error {
	i := 0
	for _, opt := range table {
		if opt.Key == "" {
			continue
		}
		v := f.Field(i)
		i++
		if v.IsNil() {
			continue
		}
		if err := opt.v.load(o, v, opt.Key, dir); err != nil {
			return err
		}
		o.MarkGiven(opt.Name)
	}
	return nil
}

// loadModels applies the config file's models: a model of a name already
// in o is replaced.
func (o *Options) loadModels(models map[string]fileModel, dir string) {
	names := make([]string, 0, len(models))
	for name := range models {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		m := models[name]
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
}
