//go:build cgo

// These tests run the real extractor (ONNX Runtime, cgo); the packages
// they test are cgo-free (TestFSIsCgoFree).

package fs_test

import (
	"context"
	"log"
	"os"
	"os/signal"

	"github.com/featurefs/featurefs/cache"
	"github.com/featurefs/featurefs/extractor"
	featurefs "github.com/featurefs/featurefs/fs"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
)

// Example_mount serves the images of a local directory as ResNet-50
// features on /mnt/features until interrupted. featurefs mount does the
// same with flags, a config file and a background process.
func Example_mount() {
	ctx := context.Background()
	b, err := bucket.Open(ctx, "/data/images", bucket.S3Options{})
	if err != nil {
		log.Fatal(err)
	}
	store, err := cache.Open(cache.Options{Dir: "/var/cache/featurefs", MaxBytes: 10 << 30})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	svc, err := extractor.New(extractor.DefaultConfig(), []extractor.ModelSpec{{Name: "resnet50", Path: "/models/resnet50.onnx"}})
	if err != nil {
		log.Fatal(err)
	}
	defer svc.Close()
	p, err := features.New(features.Config{Bucket: b, Extractor: svc, Cache: store})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close() // after the tree, before the extractor and the cache
	tree, err := featurefs.New(p, featurefs.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer tree.Close()
	srv, err := tree.Mount("/mnt/features", featurefs.MountOptions{FsName: "/data/images", DirectMount: true})
	if err != nil {
		log.Fatal(err)
	}
	// Reading /mnt/features/features/resnet50/layer12/cat/001.npy now runs
	// the model up to layer 12 on /data/images/cat/001.jpg.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	go func() { <-sig; srv.Unmount() }()
	srv.Wait()
}
