package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/mountopts"
)

func TestParseMountFlagsOverrideConfigFile(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(cfg, []byte(`
models:
  r50: {path: /file.onnx, aliases: {pool: layer18}}
cache-size: 20GiB
device: cpu
metadata-ttl: 2m
`), 0o644); err != nil {
		t.Fatal(err)
	}
	o, pos, err := parseMount([]string{"--cache-size", "512MiB", "src", "--config", cfg, "--model", "r50=/flag.onnx", "--model", "vgg=/v.onnx", "mnt", "--foreground"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(pos, " ") != "src mnt" {
		t.Errorf("positional = %q", pos)
	}
	if o.CacheSize != 512*mountopts.MiB || o.Device != "cpu" || o.MetadataTTL != 2*time.Minute || !o.Foreground || o.ConfigFile != cfg {
		t.Errorf("options = %+v", o)
	}
	if len(o.Models) != 2 || o.Models[0].Path != "/flag.onnx" || o.Models[0].Aliases["pool"] != "layer18" || o.Models[1].Name != "vgg" {
		t.Errorf("models = %+v", o.Models)
	}
	if _, _, err := parseMount([]string{"--cache-size", "lots", "a", "b"}); err == nil || !strings.Contains(err.Error(), "lots") {
		t.Errorf("bad size: %v", err)
	}
}

// TestServeAndWarmParseLikeMount: serve and warm take the config file and
// the flags through the same two-pass parse as mount, with their own
// options beside it.
func TestServeAndWarmParseLikeMount(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(cfg, []byte("cache-size: 20GiB\ndevice: cpu\nmetadata-ttl: 2m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o, so, pos, err := parseServe([]string{"--listen", "127.0.0.1:7071", "--config", cfg, "--cache-size", "1GiB", "s3://b"})
	if err != nil {
		t.Fatal(err)
	}
	if o.CacheSize != mountopts.GiB || o.Device != "cpu" || o.MetadataTTL != 2*time.Minute || o.ConfigFile != cfg ||
		so.Listen != "127.0.0.1:7071" || strings.Join(pos, " ") != "s3://b" {
		t.Errorf("serve: options %+v, serve options %+v, positional %q", o, so, pos)
	}
	o, w, pos, err := parseWarm([]string{"--jobs", "3", "--config", cfg, "--device", "auto", "dir"})
	if err != nil {
		t.Fatal(err)
	}
	if o.CacheSize != 20*mountopts.GiB || o.Device != "auto" || o.LogLevel != "warn" || w.jobs != 3 || w.interval != 5*time.Second ||
		strings.Join(pos, " ") != "dir" {
		t.Errorf("warm: options %+v, warm options %+v, positional %q", o, w, pos)
	}
}
