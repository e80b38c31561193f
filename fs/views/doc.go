// Package views describes the files featurefs generates, without FUSE:
// what a directory of a view lists, each file's size and modification
// time known without computing it, and its bytes at an offset. fs/ renders
// any views.File with one generic node (fs/viewfile.go), so that a new
// view touches no go-fuse code.
//
// The array view (array.go, dataset.go): for a directory of a layer's
// feature tree, one .npy of every image's feature in torchvision
// DatasetFolder's order, its labels and its row list, so that
// np.load(PATH, mmap_mode="r") gives a whole split as one (N, ...) array,
// computed on demand from and into the cache entries the per-file views
// use.
package views
