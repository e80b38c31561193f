package features

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/figures"
	"github.com/featurefs/featurefs/fs/naming"
)

// This file holds predictions: the top classes of a model whose last layer
// is class scores, computed from that layer's feature (the same path as a
// read of it: cache, feature store, extraction, and with --remote the
// servers), softmax and top-k done here. The tree's predictions.jsonl files
// and featurefs warm --predictions write them as JSON lines.

// Class is one of a prediction's top classes.
type Class struct {
	// Index is the class's index in the last layer.
	Index int
	// Score is its softmax probability.
	Score float64
}

// Prediction is one image's top classes, or why it has none.
type Prediction struct {
	// Key is the object key.
	Key string
	// Top are the classes, highest score first (ties: lower index first).
	Top []Class
	// Err is why the image has no prediction ("" when it has one).
	Err string
	// BadObject is true when the object itself is at fault (Err is set).
	BadObject bool
}

// Classes is the class dimension of m: the elements per sample of its last
// layer, the layer a predictions view reads.
func Classes(m *api.Model) int {
	if len(m.Layers) == 0 {
		return 0
	}
	n := int64(1)
	for _, d := range m.Layers[len(m.Layers)-1].Shape {
		n *= d
	}
	return int(n)
}

// CheckLabels returns an error, naming the model and the counts, when
// labels are not one name per class of m's last layer.
func CheckLabels(m *api.Model, labels []string) error {
	last := m.Layers[len(m.Layers)-1]
	if n := Classes(m); n != len(labels) {
		return fmt.Errorf("%d class names for model %s, whose last layer (%s, %s) has %d classes", len(labels), m.Name, last.Name, api.ShapeString(last.Shape), n)
	}
	return nil
}

// Labels returns the class names of model (Config.Labels), or nil.
func (p *Pipeline) Labels(model string) []string { return p.cfg.Labels[model] }

// TopK returns the k highest softmax scores of logits (all of them when k
// is larger), highest first; equal scores keep index order. The softmax is
// computed in float64, shifted by the largest logit so that it does not
// overflow.
func TopK(logits []float32, k int) []Class {
	if len(logits) == 0 || k <= 0 {
		return nil
	}
	k = min(k, len(logits))
	hi := math.Inf(-1)
	for _, v := range logits {
		hi = max(hi, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - hi)
	}
	better := func(a, b Class) bool { return a.Score > b.Score || (a.Score == b.Score && a.Index < b.Index) }
	top := make([]Class, 0, k+1)
	for i, v := range logits {
		c := Class{Index: i, Score: math.Exp(float64(v)-hi) / sum}
		if len(top) == k && !better(c, top[k-1]) {
			continue
		}
		j := len(top)
		top = append(top, c)
		for ; j > 0 && better(c, top[j-1]); j-- {
			top[j] = top[j-1]
		}
		top[j] = c
		if len(top) > k {
			top = top[:k]
		}
	}
	return top
}

// PredictionView is the view predictions read: the last layer of m.
func (p *Pipeline) PredictionView(m *api.Model) *View {
	return p.NewView(m, m.Layers[len(m.Layers)-1])
}

// Predict returns obj's top k classes at v (PredictionView) as a reader's
// read of the layer (Read): an error is in the prediction, not returned.
func (p *Pipeline) Predict(ctx context.Context, v *View, obj bucket.Object, k int) Prediction {
	data, err := p.Read(ctx, v, obj)
	if err == nil {
		var logits []float32
		if _, _, logits, err = api.DecodeNPY(data); err == nil {
			return Prediction{Key: obj.Key, Top: TopK(logits, k)}
		}
		err = fmt.Errorf("feature of %s: %w", obj.Key, err)
	}
	return Prediction{Key: obj.Key, Err: figures.ErrReason(obj.Key, err), BadObject: BadObject(err)}
}

// PredictAll returns the predictions of objs, in their order, computing
// them in parallel within the pipeline's bound on predictions in flight
// (shared by every caller: the prefetch bounds, count and bytes). A
// prediction that ctx ended before has ctx's error.
func (p *Pipeline) PredictAll(ctx context.Context, v *View, objs []bucket.Object, k int) []Prediction {
	out := make([]Prediction, len(objs))
	var wg sync.WaitGroup
	for i, obj := range objs {
		cost := p.costOf(v, obj)
		if err := p.predicting.acquire(ctx, cost); err != nil {
			for j := i; j < len(objs); j++ {
				out[j] = Prediction{Key: objs[j].Key, Err: figures.ErrReason(objs[j].Key, err)}
			}
			break
		}
		wg.Go(func() {
			defer p.predicting.release(cost)
			out[i] = p.Predict(ctx, v, obj, k)
		})
	}
	wg.Wait()
	return out
}

// PredictOptions say what PredictTree predicts.
type PredictOptions struct {
	// Model is the model's name; its last layer is class scores.
	Model string
	// Prefix is the key prefix whose images are predicted, recursively
	// ("" for the whole source).
	Prefix string
	// TopK is the classes per prediction (default 5).
	TopK int
	// Skip, if set, is asked for each image's key: true leaves it out
	// (counted in WarmProgress.Cached), as a resumed run's done keys.
	Skip func(key string) bool
	// Shard, Archives, Progress and MaxFailures are as in WarmOptions.
	Shard       spec.Shard
	Archives    []string
	Progress    func(WarmProgress)
	MaxFailures int
}

// PredictTree predicts every image under opts.Prefix (but those
// opts.Skip leaves out and, with a split opts.Shard, those of other parts),
// and calls emit with each prediction, one call at a time, in the order
// they finish; failed images are emitted too (Prediction.Err) and listed
// in the result's failures. In flight: the pipeline's bound on predictions
// (PredictAll). emit's error stops the walk and is returned; so is the
// listing's, or ctx's.
func (p *Pipeline) PredictTree(ctx context.Context, opts PredictOptions, emit func(Prediction) error) (WarmResult, error) {
	m, ok := p.cfg.Extractor.Model(opts.Model)
	if !ok {
		return WarmResult{}, fmt.Errorf("predict: %w %q", api.ErrUnknownModel, opts.Model)
	}
	if opts.TopK <= 0 {
		opts.TopK = 5
	}
	if opts.MaxFailures <= 0 {
		opts.MaxFailures = 1000
	}
	prefix := strings.TrimPrefix(opts.Prefix, "/")
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	v := p.PredictionView(m)
	w := &warmRun{opts: WarmOptions{Progress: opts.Progress, MaxFailures: opts.MaxFailures}, res: WarmResult{WarmProgress: WarmProgress{Listing: true}}}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var emitMu sync.Mutex
	var wg sync.WaitGroup
	var pages atomic.Int64
	var others int64 // the walk calls visit one object at a time
	// Members of archives are predicted through their own reads: the
	// stream hands over no bytes (want declines every member).
	none := func(bucket.Object) bool { return false }
	err := p.walk(ctx, prefix, true, &pages, otherShardsArchives(opts.Shard, opts.Archives, &others), none, func(obj bucket.Object, _ *given) error {
		if !opts.Shard.Owns(ShardUnit(obj.Key, opts.Archives)) {
			others++
			return nil
		}
		w.update(func(r *WarmResult) { r.Total++ })
		if opts.Skip != nil && opts.Skip(obj.Key) {
			w.update(func(r *WarmResult) { r.Cached++ })
			return nil
		}
		cost := p.costOf(v, obj)
		if err := p.predicting.acquire(ctx, cost); err != nil {
			return err
		}
		wg.Go(func() {
			defer p.predicting.release(cost)
			pr := p.Predict(ctx, v, obj, opts.TopK)
			if ctx.Err() != nil {
				return // not this image's failure: a rerun predicts it
			}
			emitMu.Lock()
			err := emit(pr)
			emitMu.Unlock()
			switch {
			case err != nil:
				cancel(err)
			case pr.Err != "":
				w.fail(obj.Key, pr.Err, pr.BadObject)
			default:
				w.update(func(r *WarmResult) { r.Extracted++ })
			}
		})
		return nil
	}, nil) // a bad archive: no image of it is known, so no line
	w.update(func(r *WarmResult) { r.Listing = false })
	wg.Wait()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && err == nil {
		err = cause
	} else if cause != nil && err != nil && errors.Is(err, context.Canceled) {
		err = cause
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.res.OtherShards = others
	if err != nil {
		return w.res, fmt.Errorf("predict %s %q: %w", m.Name, prefix, err)
	}
	return w.res, nil
}

// NothingToPredict reports whether PredictTree under opts would predict
// nothing: every image under opts.Prefix of opts.Shard's part is one that
// opts.Skip leaves out. It lists b (the Bucket a Pipeline would be given:
// archives shown as directories) with imageExts (nil: the default, as
// Config.ImageExtensions), needing no extractor, so
// that a resumed warm --predictions with nothing left loads no model. It
// stops at the first image left to predict (nothing false); total is the
// images of the part found (all of them when nothing is left). It visits
// what PredictTree's walk visits or more (no depth bound, no archive
// streamed), so a true answer is never wrong; any error is returned (the
// caller then runs PredictTree, which reports it).
func NothingToPredict(ctx context.Context, b bucket.Bucket, imageExts []string, opts PredictOptions) (total int64, nothing bool, err error) {
	if imageExts == nil {
		imageExts = spec.DefaultImageExtensions() // as Config.ImageExtensions
	}
	rule := naming.New(imageExts)
	prefix := strings.TrimPrefix(opts.Prefix, "/")
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	errLeft := errors.New("an image is left to predict")
	var others int64
	skipArch := otherShardsArchives(opts.Shard, opts.Archives, &others)
	var rec func(prefix string) error
	rec = func(prefix string) error {
		if skipArch != nil && skipArch(prefix) {
			return nil
		}
		return eachPage(ctx, b, prefix, nil, func(pg bucket.Page) error {
			for _, o := range pg.Objects {
				base, ok := strings.CutPrefix(o.Key, prefix)
				if !ok || !naming.ValidName(base) {
					continue
				}
				if _, img := rule.Split(base); !img || !opts.Shard.Owns(ShardUnit(o.Key, opts.Archives)) {
					continue
				}
				total++
				if opts.Skip == nil || !opts.Skip(o.Key) {
					return errLeft
				}
			}
			for _, sub := range pg.Prefixes {
				if name := strings.TrimSuffix(strings.TrimPrefix(sub, prefix), "/"); !naming.ValidName(name) {
					continue
				}
				if err := rec(sub); err != nil {
					return err
				}
			}
			return nil
		})
	}
	switch err := rec(prefix); {
	case errors.Is(err, errLeft):
		return total, false, nil
	case err != nil:
		return total, false, err
	}
	return total, true, nil
}

// PredictionLayout renders predictions as JSON lines for one model's
// labels and top-k:
//
//	{"key": "a/b.jpg", "top": [[281, "tabby", 0.61234567], ...]}
//	{"key": "a/c.jpg", "error": "..."}
//
// A class without labels has the name null; scores have 8 decimals. Lines
// may be padded with spaces to a width that depends only on the key
// (Width): the predictions files' sizes are then known from a listing.
type PredictionLayout struct {
	// TopK is the classes per line.
	TopK int
	// Labels are the class names, nil for none.
	Labels []string
	// entry is the widest "[class, name, score]".
	entry int
}

// NewPredictionLayout returns the layout of model m's predictions with
// labels (nil: none) and k classes a line.
func NewPredictionLayout(m *api.Model, labels []string, k int) *PredictionLayout {
	n := Classes(m)
	k = max(min(k, n), 1)
	name := len("null")
	for _, l := range labels {
		name = max(name, len(quote(l)))
	}
	digits := len(strconv.Itoa(max(n-1, 0)))
	return &PredictionLayout{TopK: k, Labels: labels, entry: len("[, , ]") + digits + name + scoreWidth}
}

// scoreWidth is the width of a score: 0.12345678 or 1.00000000.
const scoreWidth = 10

// minErrorRoom is the least room a padded line keeps for an error message.
const minErrorRoom = 120

// Width is the padded width of key's line, its newline included.
func (l *PredictionLayout) Width(key string) int64 {
	q := len(quote(key)) + len(keyB64(key))
	top := len(`{"key": , "top": []}`) + q + l.TopK*l.entry + (l.TopK-1)*len(", ")
	errw := len(`{"key": , "error": ""}`) + q + minErrorRoom
	return int64(max(top, errw) + 1)
}

// Append appends pr's line to b, with its newline; pad pads it with spaces
// to Width(pr.Key) (an error message too long for it is cut).
func (l *PredictionLayout) Append(b []byte, pr Prediction, pad bool) []byte {
	start := len(b)
	b = append(b, `{"key": `...)
	b = append(b, quote(pr.Key)...)
	b = append(b, keyB64(pr.Key)...)
	if pr.Err != "" {
		b = append(b, `, "error": `...)
		msg := pr.Err
		if pad {
			room := int(l.Width(pr.Key)) - 1 - (len(b) - start) - len(`}`)
			for len(quote(msg)) > room {
				r := []rune(msg)
				msg = string(r[:len(r)*3/4])
			}
		}
		b = append(b, quote(msg)...)
		b = append(b, '}')
	} else {
		b = append(b, `, "top": [`...)
		for i, c := range pr.Top {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = append(b, '[')
			b = strconv.AppendInt(b, int64(c.Index), 10)
			b = append(b, ", "...)
			if c.Index < len(l.Labels) {
				b = append(b, quote(l.Labels[c.Index])...)
			} else {
				b = append(b, "null"...)
			}
			b = append(b, ", "...)
			b = strconv.AppendFloat(b, c.Score, 'f', 8, 64)
			b = append(b, ']')
		}
		b = append(b, "]}"...)
	}
	if pad {
		for w := int(l.Width(pr.Key)) - 1; len(b)-start < w; {
			b = append(b, ' ')
		}
	}
	return append(b, '\n')
}

// keyB64 is what a line of key carries after its "key" so that the key
// can be found again: nothing for a key of valid UTF-8, else
// `, "key_b64": "..."`, its bytes in base64 (naming.RawName: JSON writes
// U+FFFD for each byte that is not UTF-8, which names no object).
func keyB64(key string) string {
	raw := naming.RawName(key)
	if raw == "" {
		return ""
	}
	return `, "key_b64": "` + raw + `"`
}

// quote is s as a JSON string.
func quote(s string) string {
	b, err := json.Marshal(s)
	if err != nil { // not for a string
		return strconv.Quote(s)
	}
	return string(b)
}

// PredictionLine is one line of a predictions file as JSON reads it.
type PredictionLine struct {
	Key string `json:"key"`
	// KeyB64 is the key's bytes in base64 where the key is not valid
	// UTF-8 (Key then holds U+FFFD in place of the bad bytes).
	KeyB64 string  `json:"key_b64,omitempty"`
	Top    [][]any `json:"top,omitempty"`
	Error  string  `json:"error,omitempty"`
}

// Top1 returns the line's top class and its name ("" without labels), ok
// false for an error line.
func (pl PredictionLine) Top1() (class int, name string, ok bool) {
	if pl.Error != "" || len(pl.Top) == 0 || len(pl.Top[0]) < 1 {
		return 0, "", false
	}
	f, ok := pl.Top[0][0].(float64)
	if !ok {
		return 0, "", false
	}
	if len(pl.Top[0]) > 1 {
		name, _ = pl.Top[0][1].(string)
	}
	return int(f), name, true
}
