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

func TestUnescapeMountinfo(t *testing.T) {
	if got := unescapeMountinfo(`/tmp/a\040b\134c`); got != `/tmp/a b\c` {
		t.Errorf("got %q", got)
	}
	if got := unescapeMountinfo(`/x\04`); got != `/x\04` {
		t.Errorf("short escape: %q", got)
	}
}

func TestCheckMountPoint(t *testing.T) {
	dir := t.TempDir()
	if err := checkMountPoint(dir, nil); err != nil {
		t.Errorf("free directory: %v", err)
	}
	if err := checkMountPoint(filepath.Join(dir, "nope"), nil); exitCode(err) != exitMountPoint || !strings.Contains(err.Error(), "mkdir -p") {
		t.Errorf("missing: %v", err)
	}
	if err := checkMountPoint("/proc", nil); exitCode(err) != exitMountPoint || !strings.Contains(err.Error(), "in use") {
		t.Errorf("/proc: %v", err)
	}
}
