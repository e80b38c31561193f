package augment

import "fmt"

// Spec asks for view View of an image drawn with Seed and the ranges
// Scale and Ratio: what a mount's view directory stands for, before the
// image's size is known. Its parameters are Draw(Identity, View, Seed,
// width, height, the model's crop size, Scale, Ratio).
type Spec struct {
	// Identity is the object version's identity (Identity(key, etag)).
	Identity string
	View     int
	Seed     uint64
	Scale    [2]float64
	Ratio    [2]float64
}

// Params draws the spec's parameters for an imgW x imgH image and output
// side size.
func (s Spec) Params(imgW, imgH, size int) Params {
	return Draw(s.Identity, s.View, s.Seed, imgW, imgH, size, s.Scale, s.Ratio)
}

// Key is the canonical text of everything but the identity, for cache keys
// and request IDs: the generator's version, the view, the seed and the
// ranges (exact: %v of a float64 round-trips).
func (s Spec) Key() string {
	return fmt.Sprintf("%s view=%d seed=%d scale=%v,%v ratio=%v,%v", domain, s.View, s.Seed, s.Scale[0], s.Scale[1], s.Ratio[0], s.Ratio[1])
}

// MaxViews bounds how many views of an image a mount, extract or a
// feature server draws (--augment, --feature-augment): view indexes are
// 0..MaxViews-1.
const MaxViews = 1000

// Xattr is the extended attribute that holds a view file's Params as JSON
// (on a mount's view files and on extract --augment's outputs).
const Xattr = "user.featurefs.augment"
