package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/remote"
	"github.com/featurefs/featurefs/mountopts"
)

// remoteSplit returns the bucket and extractor of a --remote mount: plain
// remote extraction, or split execution (--split) with a local extraction
// service over the --model files (warn tells the user of a GPU fallback).
// The returned function releases them. With split execution, sp holds it
// and its local service (a mount follows both sides' reloads through them).
func remoteSplit(ctx context.Context, o mountopts.Options, rc *remote.Client, log *slog.Logger, warn func(string)) (_ bucket.Bucket, _ features.Extractor, sp splitParts, _ func(), _ error) {
	mode := o.Remote.Split
	if mode == "" {
		mode = "none"
	}
	policy, err := spec.ParseSplitPolicy(mode)
	if err != nil {
		return nil, nil, sp, nil, failf(exitUsage, "--split: %w", err)
	}
	if o.Augment > 0 && policy.Mode != "none" {
		return nil, nil, sp, nil, failf(exitUsage, "--augment with --split %s: the views are computed whole by the feature servers; drop --split (or --augment)", policy)
	}
	if o.Augment > 0 && !rc.ServesViews() {
		return nil, nil, sp, nil, failf(exitSource, "--augment: the feature servers %s do not compute augmented views (a featurefs serve older than --augment): upgrade them, or drop --augment", rc.URLs())
	}
	if policy.Mode == "none" {
		// The servers compute everything: no local models, no profiles.
		if len(o.Models) > 0 {
			log.Debug("featurefs: --model files are only used by --split auto, raw or K")
		}
		return rc.Bucket(), rc.Extractor(), sp, func() {}, nil
	}
	if len(o.Models) == 0 {
		return nil, nil, sp, nil, failf(exitUsage, "--split %s needs the models on the mount too (--model NAME=PATH.onnx, the servers' files)", policy)
	}
	svc, err := newExtractor(o, rc.Info().DType, log, warn)
	if err != nil {
		return nil, nil, sp, nil, fmt.Errorf("split execution: %w", err)
	}
	x, err := rc.Split(ctx, remote.SplitConfig{Policy: policy, Local: svc, ProfileDir: spec.DefaultProfileDir(), ImageExtensions: o.ImageExtensions, MaxObjectSize: o.MaxObjectSize, Logger: log})
	if err != nil {
		svc.Close()
		return nil, nil, sp, nil, failf(exitModel, "--split: %w", err)
	}
	return x.Bucket(rc.Bucket()), x, splitParts{x: x, local: svc}, func() {
		x.Close()
		svc.Close()
	}, nil
}

// splitParts is a split mount's split execution and the local extraction
// service running the mount's part (both nil without --split).
type splitParts struct {
	x     *remote.SplitExtractor
	local *extractor.Service
}
