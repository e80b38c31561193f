package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/remote"
	"github.com/featurefs/featurefs/mountopts"
)

// remoteSplit returns the bucket and extractor of a --remote mount: plain
// remote extraction, or split execution (--split) with a local extraction
// service over the --model files (warn tells the user of a GPU fallback).
// The returned function releases them.
func remoteSplit(ctx context.Context, o mountopts.Options, rc *remote.Client, log *slog.Logger, warn func(string)) (bucket.Bucket, features.Extractor, func(), error) {
	mode := o.Remote.Split
	if mode == "" {
		mode = "none"
	}
	policy, err := spec.ParseSplitPolicy(mode)
	if err != nil {
		return nil, nil, nil, failf(exitUsage, "--split: %w", err)
	}
	if policy.Mode == "none" {
		// The servers compute everything: no local models, no profiles.
		if len(o.Models) > 0 {
			log.Debug("featurefs: --model files are only used by --split auto, raw or K")
		}
		return rc.Bucket(), rc.Extractor(), func() {}, nil
	}
	if len(o.Models) == 0 {
		return nil, nil, nil, failf(exitUsage, "--split %s needs the models on the mount too (--model NAME=PATH.onnx, the servers' files)", policy)
	}
	svc, err := newExtractor(o, rc.Info().DType, log, warn)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("split execution: %w", err)
	}
	x, err := rc.Split(ctx, remote.SplitConfig{Policy: policy, Local: svc, ProfileDir: spec.DefaultProfileDir(), ImageExtensions: o.ImageExtensions, MaxObjectSize: o.MaxObjectSize, Logger: log})
	if err != nil {
		svc.Close()
		return nil, nil, nil, failf(exitModel, "--split: %w", err)
	}
	return x.Bucket(rc.Bucket()), x, func() {
		x.Close()
		svc.Close()
	}, nil
}
