package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/featurefs/featurefs/mountopts"
)

// TestMemoryLimitKeepsFlagsGivenAtDefault: mount's flags and config file
// mark what they give: with --memory-limit 512MiB, --metadata-cache-size
// 256MiB, --decode-memory 1GiB and --fetch-memory 64MiB (each its
// default's value) keep those sizes, not the limit's shares (128, 64 and
// 32 MiB); a config-file key does the same, and a bound given by neither
// is sized from the limit.
func TestMemoryLimitKeepsFlagsGivenAtDefault(t *testing.T) {
	const mib = mountopts.MiB
	o, _, err := parseMount([]string{"--memory-limit", "512MiB", "--metadata-cache-size", "256MiB", "--decode-memory", "1GiB", "--fetch-memory", "64MiB", "src", "mnt"})
	if err != nil {
		t.Fatal(err)
	}
	o.ApplyMemoryLimit()
	if o.MetadataCacheSize != 256*mib || o.DecodeMemory != 1024*mib || o.FetchMemory != 64*mib {
		t.Errorf("flags: metadata %s, decode %s, fetched objects %s; want 256MiB, 1GiB and 64MiB as given",
			mountopts.FormatSize(o.MetadataCacheSize), mountopts.FormatSize(o.DecodeMemory), mountopts.FormatSize(o.FetchMemory))
	}

	cfg := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(cfg, []byte("memory-limit: 512MiB\nmetadata-cache-size: 256MiB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o, _, err = parseMount([]string{"--config", cfg, "--fetch-memory", "64MiB", "src", "mnt"})
	if err != nil {
		t.Fatal(err)
	}
	o.ApplyMemoryLimit()
	if o.MetadataCacheSize != 256*mib || o.FetchMemory != 64*mib || o.DecodeMemory != 64*mib {
		t.Errorf("config file: metadata %s, fetched objects %s, decode %s; want 256MiB (the file's), 64MiB (the flag's) and 64MiB (an eighth of 512MiB, not given)",
			mountopts.FormatSize(o.MetadataCacheSize), mountopts.FormatSize(o.FetchMemory), mountopts.FormatSize(o.DecodeMemory))
	}
}
