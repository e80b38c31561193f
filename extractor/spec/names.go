package spec

import (
	"slices"
	"strconv"
	"strings"
)

// LayersFile is the name of the layers table in each model directory
// (features/<model>/layers). It is reserved: no model and no alias may
// take it.
const LayersFile = "layers"

// layerPrefix starts every layer directory name.
const layerPrefix = "layer"

// LayerName is the directory name of layer index i: "layer12".
func LayerName(i int) string { return layerPrefix + strconv.Itoa(i) }

// LayerIndex returns the index a layer directory name stands for:
// "layer12" is 12. Only LayerName's form is one: "layer012", "layer-1"
// and "layer" are not.
func LayerIndex(name string) (int, bool) {
	d, ok := strings.CutPrefix(name, layerPrefix)
	if !ok || !allDigits(d) || (len(d) > 1 && d[0] == '0') {
		return 0, false
	}
	i, err := strconv.Atoi(d)
	return i, err == nil
}

// LayerLike reports whether name is "layer" followed by digits: a layer
// directory name or one a reader would take for one ("layer012"). Such a
// name cannot be an alias.
func LayerLike(name string) bool {
	d, ok := strings.CutPrefix(name, layerPrefix)
	return ok && allDigits(d)
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// defaultImageExtensions is what DefaultImageExtensions returns copies of.
var defaultImageExtensions = []string{"jpg", "jpeg", "png"}

// DefaultImageExtensions returns the object extensions shown as .npy files
// and computed when none are configured (--image-extensions): lower case,
// without dots.
func DefaultImageExtensions() []string { return slices.Clone(defaultImageExtensions) }

// IsImage reports whether base (a key's last component) ends in one of
// exts (lower case, without dots; nil: DefaultImageExtensions), in any
// ASCII case: "a.JPG" is an image, "a", "a.txt" and "jpg" are not, ".jpg"
// is one (of empty stem).
func IsImage(base string, exts []string) bool {
	_, _, ok := SplitImage(base, exts)
	return ok
}

// SplitImage is IsImage that also returns base's stem and extension (as
// written, without the dot): "a.JPG" is "a" and "JPG". The mount's naming
// rule and every other image check go through it.
func SplitImage(base string, exts []string) (stem, ext string, ok bool) {
	i := strings.LastIndexByte(base, '.')
	if i < 0 {
		return "", "", false
	}
	if exts == nil {
		exts = defaultImageExtensions
	}
	ext = base[i+1:]
	if !isASCII(ext) {
		return "", "", false
	}
	for _, e := range exts {
		if strings.EqualFold(ext, e) {
			return base[:i], ext, true
		}
	}
	return "", "", false
}

func isASCII(s string) bool {
	for _, c := range []byte(s) {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// DefaultMaxPixels is the largest image (width*height) decoded when no limit
// is given: PIL's Image.MAX_IMAGE_PIXELS.
const DefaultMaxPixels int64 = 89478485
