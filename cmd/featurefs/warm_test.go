package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/mountopts"
)

// TestWarmWaitsForCacheWrites: warm through a mount returns once the
// mount's stats file says no feature is queued for its cache write; a
// stats file without the field (an older mount) is not waited for.
func TestWarmWaitsForCacheWrites(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, ".featurefs"), 0o755); err != nil {
		t.Fatal(err)
	}
	stats := filepath.Join(root, ".featurefs", "stats")
	write := func(s string) {
		tmp := stats + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Error(err)
		}
		if err := os.Rename(tmp, stats); err != nil {
			t.Error(err)
		}
	}
	write(`{"fs": {"cache_write_queued": 3}}` + "\n   \n")
	emptying := make(chan struct{})
	go func() {
		time.Sleep(100 * time.Millisecond) // while warm polls
		close(emptying)
		write(`{"fs": {"cache_write_queued": 0}}`)
	}()
	waitCacheWrites(context.Background(), root, time.Minute)
	select {
	case <-emptying:
	default:
		t.Error("warm returned while the mount still had cache writes queued")
	}

	write(`{"fs": {"reads": 1}}`)
	done := make(chan struct{})
	go func() { waitCacheWrites(context.Background(), root, time.Hour); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Error("warm waited on a mount whose stats have no cache write queue")
	}
}

// warm --shard K/N: only with --source (a mount's PATH names features, not
// the source's objects), and K/N checked before anything is opened: K < N,
// N >= 1, numbers (an unexpanded $(JOB_COMPLETION_INDEX) says so). Mount
// has no --shard; warm -h has it.
func TestWarmShardUsage(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--shard", "1/3", dir},
		{"--source", dir, "--model", "m=" + os.Args[0], "--layer", "layer0", "--shard", "3/3"},
		{"--source", dir, "--model", "m=" + os.Args[0], "--layer", "layer0", "--shard", "0/0"},
		{"--source", dir, "--model", "m=" + os.Args[0], "--layer", "layer0", "--shard", "$(JOB_COMPLETION_INDEX)/3"},
		{"--source", dir, "--model", "m=" + os.Args[0], "--layer", "layer0", "--shard", "1"},
	} {
		if code := runWarm(args); code != exitUsage {
			t.Errorf("featurefs warm %s: exit %d, want %d", strings.Join(args, " "), code, exitUsage)
		}
	}
	o := mountopts.Default()
	var w warmArgs
	if warmFlags(&o, &w).Lookup("shard") == nil {
		t.Error("featurefs warm has no --shard")
	}
	if mountFlags(&o).Lookup("shard") != nil || mountOnly("shard") {
		t.Error("--shard is warm's alone: mount must not take it, warm must not refuse it")
	}
	if err := warmFlags(&o, &w).Parse([]string{"--shard", "2/5"}); err != nil || o.Shard != "2/5" {
		t.Errorf("--shard 2/5: %v, Options.Shard %q", err, o.Shard)
	}
}

// A sharded warm's summary and failure list name the shard, and say how
// many objects it extracted, found and left to the other shards.
func TestWarmShardSummary(t *testing.T) {
	var b strings.Builder
	warmOutcome{total: 4, done: 4, failed: 1, shard: "1/3", counted: true, extracted: 2, found: 1, others: 9,
		failures: []warmFailure{{key: "train/bad.jpg", reason: "not an image"}}}.print(&b)
	want := "featurefs warm shard 1/3: 3 of 4 done in 0s, 1 failed\n" +
		"featurefs warm shard 1/3: 2 extracted, 1 found cached or in the feature store; 9 objects left to the other shards\n" +
		"failed objects of shard 1/3 (1):\n  train/bad.jpg: not an image\n"
	if b.String() != want {
		t.Errorf("summary:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	warmOutcome{total: 2, done: 2, counted: true, extracted: 2}.print(&b)
	if want := "featurefs warm: 2 of 2 done in 0s, 0 failed\nfeaturefs warm: 2 extracted, 0 found cached or in the feature store\n"; b.String() != want {
		t.Errorf("unsharded summary:\n%s\nwant:\n%s", b.String(), want)
	}
}
