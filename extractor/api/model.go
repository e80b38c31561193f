package api

// This file describes a model as every side knows it: its identity, its
// layers and how images are fed to it.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/featurefs/featurefs/extractor/spec"
)

// Model is one model: its identity, its layers and how images are fed to
// it. Fields are read-only once it is handed out. Package extractor fills
// every field from the ONNX file it loads; a model that feature servers
// run (fs/remote's client) has no file here: Path, Input, InputShape and
// FixedBatch are then zero, and its layers table is the servers'
// (ServersTable).
type Model struct {
	// Name is the model's directory name under features/.
	Name string
	// Path is the .onnx file it was loaded from.
	Path string
	// Digest is the hex sha256 of the ONNX bytes: the model's version.
	// Features are keyed by each layer's own digest (Layer.Digest).
	Digest string
	// Layers are the model's block boundaries, by index.
	Layers []Layer
	// Aliases maps extra directory names to layer names ("pool": "layer18").
	Aliases map[string]string
	// Preprocess is how an image becomes the model's input.
	Preprocess Preprocess
	// Input is the ONNX name of the model's image input.
	Input string
	// InputShape is the input's per-sample shape, e.g. 3x224x224.
	InputShape []int64
	// FixedBatch is the batch size the model's graph fixes (the input's
	// first dimension is a number, as in a model exported without dynamic
	// axes), or 0 when the batch dimension is symbolic. Every run of a
	// model with a fixed batch feeds exactly that many inputs.
	FixedBatch int
	// Loaded is when this version was loaded (a reload replaces the
	// model: docs/MODELS.md); zero for a model feature servers run.
	Loaded time.Time
	// ServersTable is the layers table of a model that feature servers run,
	// as they wrote it (fs/remote's client sets it); Table returns it. Empty
	// for a model loaded here.
	ServersTable string
}

// Lookup resolves a directory name, "layer12" or an alias, to a layer.
func (m *Model) Lookup(dir string) (Layer, bool) {
	return m.lookup(dir, 0)
}

func (m *Model) lookup(dir string, depth int) (Layer, bool) {
	if i, ok := spec.LayerIndex(dir); ok {
		if i >= len(m.Layers) {
			return Layer{}, false
		}
		return m.Layers[i], true
	}
	if target, ok := m.Aliases[dir]; ok && depth < 4 {
		if l, ok := m.lookup(target, depth+1); ok {
			return l, true
		}
		for _, l := range m.Layers {
			if l.Tensor == target {
				return l, true
			}
		}
	}
	return Layer{}, false
}

// Table returns the layers as a text table: index, directory name, ONNX
// tensor name, per-sample shape, bytes per sample (float32), cumulative
// GFLOPs per sample, the first 12 hex digits of the layer's digest
// (Layer.Digest, "-" where there is none) and aliases. For a model that feature servers run, it is their
// table (ServersTable).
func (m *Model) Table() string {
	if m.ServersTable != "" {
		return m.ServersTable
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# model %s  sha256 %s  input %s %s", m.Name, m.Digest, m.Input, ShapeString(m.InputShape))
	if m.FixedBatch > 0 {
		fmt.Fprintf(&b, "  fixed batch %d", m.FixedBatch)
	}
	b.WriteString("\n")
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "index\tname\ttensor\tshape\tbytes/sample\tcum GFLOPs\tdigest\taliases")
	for _, l := range m.Layers {
		var al []string
		for a, t := range m.Aliases {
			if t == l.Name || t == l.Tensor {
				al = append(al, a)
			}
		}
		slices.Sort(al)
		d := l.Digest
		if d == "" {
			d = "-"
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%.3f\t%.12s\t%s\n", l.Index, l.Name, l.Tensor, ShapeString(l.Shape), l.Bytes, l.CumGFLOPs, d, strings.Join(al, ","))
	}
	w.Flush()
	return b.String()
}

// InputElements returns the number of float32s of one sample's input
// (channels x crop x crop).
func (m *Model) InputElements() int {
	n := 1
	for _, d := range m.InputShape {
		n *= int(d)
	}
	return n
}

// ShapeString formats a shape as its dimensions joined by "x": 3x224x224.
func ShapeString(s []int64) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = strconv.FormatInt(d, 10)
	}
	return strings.Join(parts, "x")
}
