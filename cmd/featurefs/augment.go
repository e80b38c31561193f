package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/featurefs/featurefs/cache/safefile"
	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/extractor/augment"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/naming"
	"github.com/featurefs/featurefs/mountopts"
)

// extract --augment K: K augmented views of every image (issue 41,
// docs/AUGMENT.md). View k of an image is written to
// out/<k>/<its usual path>, so that DatasetFolder(out/<epoch % K>) reads
// one view per epoch; its parameters (the crop box in the image's pixels,
// the flip, the output size, the seed and k) are the file's extended
// attribute user.featurefs.augment, and a line of the augment.jsonl
// beside it.

// augmentXattr is the extended attribute holding a view's parameters.
const augmentXattr = augment.Xattr

// augmentJSONL is the file, in every directory of views, with one line of
// parameters per view file in it.
const augmentJSONL = "augment.jsonl"

// augmentArgs are extract's --augment flags.
type augmentArgs struct {
	views        int
	seed         uint64
	scale, ratio string
	// scaleR and ratioR are scale and ratio parsed.
	scaleR, ratioR [2]float64
}

// addAugmentFlags registers the --augment flags on fl.
func addAugmentFlags(fl *flag.FlagSet, a *augmentArgs) {
	fl.IntVar(&a.views, "augment", 0, "write this many augmented views of every image, view k under -o's k/ (torchvision's RandomResizedCrop + RandomHorizontalFlip, drawn per image, view and seed: docs/AUGMENT.md); 0: the plain view")
	fl.Uint64Var(&a.seed, "augment-seed", 0, "the seed of the augmented views' random numbers")
	fl.StringVar(&a.scale, "augment-scale", "0.08,1", "RandomResizedCrop's scale range: the crop's area as a fraction of the image's, `lo,hi`")
	fl.StringVar(&a.ratio, "augment-ratio", "0.75,1.3333333333333333", "RandomResizedCrop's aspect ratio range, `lo,hi`")
}

// check parses and checks the --augment flags.
func (a *augmentArgs) check() error {
	if err := mountopts.CheckViews("augment", a.views); err != nil {
		return err
	}
	var err error
	if a.scaleR, err = mountopts.ParseRange("augment-scale", a.scale); err != nil {
		return err
	}
	if a.ratioR, err = mountopts.ParseRange("augment-ratio", a.ratio); err != nil {
		return err
	}
	if err := augment.CheckRanges(a.scaleR, a.ratioR); err != nil {
		return fmt.Errorf("--augment-scale %s --augment-ratio %s: %w", a.scale, a.ratio, err)
	}
	return nil
}

// viewLine is a line of augment.jsonl: the view file's name in its
// directory (with its bytes in base64 when it is not UTF-8:
// naming.RawName) and its parameters, as a mount's augment.jsonl has it.
type viewLine struct {
	File    string `json:"file"`
	FileB64 string `json:"file_b64,omitempty"`
	augment.Params
}

// extractViews writes views.views augmented views of every image: view k
// of images[i] to out/<k>/names[i]. An image's identity for the random
// numbers is its path under -o's root with its own extension (viewKey) and
// its size and modification time as a local-directory mount makes its
// ETag: a mount of that root directory with the same --augment-seed shows
// the same views.
func extractViews(ctx context.Context, svc *extractor.Service, model string, layer extractor.Layer, views augmentArgs,
	images, names []string, out string, prog *progress, maxObject int64) warmOutcome {
	m, _ := svc.Model(model)
	size := m.Preprocess.Crop
	k := views.views
	vImages := make([]string, 0, len(images)*k)
	vNames := make([]string, 0, len(images)*k)
	for v := range k {
		for i, img := range images {
			vImages = append(vImages, img)
			vNames = append(vNames, filepath.Join(strconv.Itoa(v), names[i]))
		}
	}
	params := make([]augment.Params, len(vImages)) // each written by its own image's goroutine
	written := make([]bool, len(vImages))
	var warnOnce sync.Once
	res := extractEach(ctx, vImages, vNames, out, prog, func(ctx context.Context, j int) ([]byte, error) {
		img, v := vImages[j], j/len(images)
		data, err := readRegular(img, maxObject)
		if err != nil {
			return nil, err
		}
		w, h, _, err := extractor.CheckImage(data, 0)
		if err != nil {
			return nil, err
		}
		st, err := os.Stat(img)
		if err != nil {
			return nil, err
		}
		id := augment.Identity(viewKey(names[j%len(images)], img), fmt.Sprintf("%x-%x", st.Size(), st.ModTime().UnixNano()))
		p := augment.Draw(id, v, views.seed, w, h, size, views.scaleR, views.ratioR)
		params[j] = p
		return svc.Extract(ctx, extractor.Request{
			Model: model, Layer: layer.Index, Key: img, ID: id, Priority: extractor.Foreground, View: &p,
			Fetch: func(context.Context) ([]byte, error) { return data, nil },
		})
	}, func(root *os.Root, j int) error {
		b, err := json.Marshal(params[j])
		if err != nil {
			return err
		}
		f, err := root.OpenFile(vNames[j], os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		err = unix.Fsetxattr(int(f.Fd()), augmentXattr, b, 0)
		if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP) {
			warnOnce.Do(func() {
				fmt.Fprintf(os.Stderr, "featurefs extract: warning: %s takes no extended attributes (%v): the views' parameters are in the %s files only\n", out, err, augmentJSONL)
			})
			err = nil
		}
		written[j] = err == nil
		return err
	})
	if err := writeViewLines(out, vNames, params, written); err != nil {
		res.failed++
		res.failures = append(res.failures, warmFailure{key: filepath.Join(out, augmentJSONL), reason: err.Error()})
	}
	return res
}

// writeViewLines writes, in every directory of view files written, its
// augment.jsonl: one line per file, by name. Where the outputs (names,
// written or not) have a directory called augment.jsonl, that directory
// keeps the name and the file is augment.jsonl's moved name, as a mount
// shows it (naming.Generated).
func writeViewLines(out string, names []string, params []augment.Params, written []bool) error {
	dirs := map[string][]viewLine{}
	taken := map[string]bool{} // directories holding a directory called augment.jsonl
	for j, n := range names {
		n = filepath.ToSlash(n)
		for d := path.Dir(n); d != "."; d = path.Dir(d) {
			if parent, base := path.Split(d); base == augmentJSONL {
				taken[parent] = true
			}
		}
		if written[j] {
			d, f := path.Split(n)
			dirs[d] = append(dirs[d], viewLine{File: f, FileB64: naming.RawName(f), Params: params[j]})
		}
	}
	root, err := os.OpenRoot(out)
	if err != nil {
		return err
	}
	defer root.Close()
	for d, lines := range dirs {
		slices.SortFunc(lines, func(a, b viewLine) int { return strings.Compare(a.File, b.File) })
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		for _, l := range lines {
			if err := enc.Encode(l); err != nil {
				return err
			}
		}
		name := naming.Generated(augmentJSONL).Name(taken[d])
		if err := safefile.WriteFileIn(root, filepath.Join(filepath.FromSlash(d), name), buf.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// augmentConfig is the mount's augmented views (--augment and its flags).
func augmentConfig(o mountopts.Options) features.AugmentConfig {
	if o.Augment <= 0 && o.FeatureAugment <= 0 {
		return features.AugmentConfig{}
	}
	scale, ratio := o.AugmentRanges()
	return features.AugmentConfig{Views: o.Augment, Seed: uint64(o.AugmentSeed), Scale: scale, Ratio: ratio,
		FeatureViews: o.FeatureAugment, FeatureOps: o.FeatureOps()}
}

// viewKey is the object key a local-directory mount of -o's root would
// give image img written as name: name, slash-separated, with img's
// extension instead of .npy (a.npy of a.jpg is a.jpg; a.jpg.npy, written
// so beside an a.png, is a.jpg).
func viewKey(name, img string) string {
	k := strings.TrimSuffix(filepath.ToSlash(name), ".npy")
	if ext := filepath.Ext(img); !strings.HasSuffix(k, ext) {
		k += ext
	}
	return k
}
