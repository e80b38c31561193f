package extractor

// This file turns encoded image bytes and an augmented view's parameters
// (extractor/augment) into the model input tensor exactly as torchvision
// 0.14 does on a PIL image:
//
//	F.resized_crop(img, top, left, height, width, [size, size])
//	    = img.crop((left, top, left+width, top+height)).resize((size, size), BILINEAR)
//	F.hflip (when flip), ToTensor(), Normalize(mean, std)
//
// Pillow's crop-then-resize resamples the cropped image alone: its filter
// taps are clamped at the crop's edges, never reading the pixels around
// it, so the resize is planned on a width x height image whose rows are
// the crop's part of the source rows. The image is always decoded at full
// size (no FastDecode DCT scaling), and only the rows the resize reads.

import (
	"context"
	"fmt"
	"image"

	"github.com/featurefs/featurefs/extractor/augment"
)

// maxViewSide bounds a view's output side, as Preprocess bounds Crop.
const maxViewSide = 8192

// checkView returns an error naming what is wrong with v's box or size
// (the image's own bounds are checked once its header is read).
func checkView(v augment.Params) error {
	if v.Size <= 0 || v.Size > maxViewSide {
		return fmt.Errorf("extractor: view size %d must be in 1..%d", v.Size, maxViewSide)
	}
	if v.Width <= 0 || v.Height <= 0 || v.Top < 0 || v.Left < 0 {
		return fmt.Errorf("extractor: view box top=%d left=%d height=%d width=%d is empty or negative",
			v.Top, v.Left, v.Height, v.Width)
	}
	return nil
}

// viewRGB decodes data and returns the view's Size x Size RGB (HWC,
// uint8): the crop box resampled with Pillow's antialiased bilinear
// filter, mirrored when v.Flip. The result lives in sc. A box that does
// not lie inside the image matches ErrBadImage (the parameters are for
// another image).
func viewRGB(v augment.Params, data []byte, maxPixels int64, sc *preprocScratch) ([]byte, error) {
	var outside error
	region := func(w, h, _ int) image.Rectangle {
		if v.Width > w || v.Left > w-v.Width || v.Height > h || v.Top > h-v.Height { // no overflow
			outside = badImage(fmt.Sprintf("view box top=%d left=%d height=%d width=%d lies outside the %dx%d image",
				v.Top, v.Left, v.Height, v.Width, w, h), nil)
			return image.Rectangle{}
		}
		// The plan's source rectangle is in the crop's coordinates.
		return sc.rs.plan(v.Width, v.Height, v.Size, v.Size, 0, 0, v.Size, v.Size).Add(image.Pt(v.Left, v.Top))
	}
	img, err := decodeRGBScaled(data, maxPixels, sc.rgb, &sc.jpegArena, nil, region)
	sc.rgb = img.pix
	if err != nil {
		return nil, err
	}
	if outside != nil {
		return nil, outside
	}
	// The crop as an image of its own: the same rows, its origin moved to
	// (left, top).
	crop := img
	crop.w, crop.h = v.Width, v.Height
	crop.x0 -= v.Left
	crop.y0 -= v.Top
	out := sc.rs.run(crop)
	if v.Flip {
		for y := 0; y < v.Size; y++ {
			row := out[3*v.Size*y : 3*v.Size*(y+1)]
			for i, j := 0, v.Size-1; i < j; i, j = i+1, j-1 {
				a, b := row[3*i:3*i+3:3*i+3], row[3*j:3*j+3:3*j+3]
				a[0], a[1], a[2], b[0], b[1], b[2] = b[0], b[1], b[2], a[0], a[1], a[2]
			}
		}
	}
	return out, nil
}

// ApplyViewPreprocess decodes a JPEG or PNG image and writes an augmented
// view's model input, CHW float32 of length 3*view.Size*view.Size, into
// dst: torchvision's F.resized_crop(img, view.Top, view.Left, view.Height,
// view.Width, [view.Size, view.Size]) (PIL bilinear, antialiased), F.hflip
// when view.Flip, then ToTensor() and Normalize(p.Mean, p.Std), on
// Image.open(...).convert("RGB"). p's Resize, Crop and FastDecode are not
// used: a view is always decoded at full size. Images larger than
// maxPixels (DefaultMaxPixels when <= 0) are rejected from their header;
// errors caused by the input, a box outside the image included, match
// ErrBadImage.
func ApplyViewPreprocess(p Preprocess, view augment.Params, data []byte, maxPixels int64, dst []float32) error {
	return applyViewPreprocess(context.Background(), p, view, data, maxPixels, dst, nil)
}

// applyViewPreprocess is ApplyViewPreprocess with the decode's memory
// taken from budget (nil: none), as applyPreprocess.
func applyViewPreprocess(ctx context.Context, p Preprocess, view augment.Params, data []byte, maxPixels int64, dst []float32, budget *decodeBudget) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if err := checkView(view); err != nil {
		return err
	}
	full := func(string, int, int) int { return 1 }
	crop := func(sc *preprocScratch) ([]byte, error) { return viewRGB(view, data, maxPixels, sc) }
	return decodeNormalize(ctx, p, "view preprocess", view.Size, data, maxPixels, dst, budget, full, crop)
}

// ViewParams returns the parameters spec draws for the image data at
// output side size, its width and height read from its header (CheckImage:
// an error matching ErrBadImage for what is not a usable image).
func ViewParams(spec augment.Spec, data []byte, size int, maxPixels int64) (augment.Params, error) {
	w, h, _, err := CheckImage(data, maxPixels)
	if err != nil {
		return augment.Params{}, err
	}
	return spec.Params(w, h, size), nil
}

// ViewParams returns the parameters of the augmented view spec of the
// image data for model: what an Extract with Request.Augment spec
// computes the view of (the model's crop size, the service's MaxPixels).
func (s *Service) ViewParams(model string, spec augment.Spec, data []byte) (augment.Params, error) {
	m, ok := s.Model(model)
	if !ok {
		return augment.Params{}, fmt.Errorf("extractor: no model %q", model)
	}
	return ViewParams(spec, data, m.Preprocess.Crop, s.cfg.MaxPixels)
}
