package mountopts

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// sampleOf is a value other than the default for an option, as a flag
// takes it and as the config file writes it (YAML).
func sampleOf(t *testing.T, opt *Option) (flagText, yamlText string) {
	t.Helper()
	switch opt.Name {
	case "model":
		return "r50=/m/r50.onnx", "{r50: {path: /m/r50.onnx}}"
	case "image-extensions":
		return "tif,bmp", "[tif, bmp]"
	case "labels":
		return "r50=/m/classes.txt", "{r50: /m/classes.txt}"
	case "remote":
		return "http://h:7070", ""
	}
	o := Default()
	switch p := opt.Target(&o).(type) {
	case *string:
		return "sample-" + opt.Name, "sample-" + opt.Name
	case *bool:
		if *p { // a default of true (--passthrough)
			return "false", "false"
		}
		return "true", "true"
	case *int:
		return "7", "7"
	case *int64:
		return "1234", "1234"
	case *time.Duration:
		return "7s", "7s"
	case Value:
		if _, ok := p.(sizeValue); ok {
			return "3MiB", "3MiB"
		}
	}
	t.Fatalf("--%s: no sample for %T", opt.Name, opt.Target(&o))
	return "", ""
}

// Every option of the table: its flag and its config-file key (when it
// has one) set the same field to the same value, a value other than its
// default; no two options share a flag, a key or a field; and the keys are
// the flags' names (but models:, of --model).
func TestEveryOptionFlagAndKeyAgree(t *testing.T) {
	names, keys := map[string]bool{}, map[string]bool{}
	for _, opt := range Table() {
		if names[opt.Name] || (opt.Key != "" && keys[opt.Key]) {
			t.Errorf("--%s (key %q) is in the table twice", opt.Name, opt.Key)
		}
		names[opt.Name], keys[opt.Key] = true, true
		if opt.Key != "" && opt.Key != opt.Name && !(opt.Name == "model" && opt.Key == "models") {
			t.Errorf("--%s: config key %q is not the flag's name", opt.Name, opt.Key)
		}
		if opt.In == 0 || opt.Help == "" {
			t.Errorf("--%s: no command or no help", opt.Name)
		}

		flagText, yamlText := sampleOf(t, opt)
		byFlag := Default()
		switch p := opt.Target(&byFlag).(type) {
		case Value:
			if err := p.Set(flagText); err != nil {
				t.Fatalf("--%s %s: %v", opt.Name, flagText, err)
			}
		default:
			if err := setTyped(p, flagText); err != nil {
				t.Fatalf("--%s %s: %v", opt.Name, flagText, err)
			}
		}
		if reflect.DeepEqual(byFlag, Default()) {
			t.Errorf("--%s %s changed nothing", opt.Name, flagText)
		}
		if opt.Key == "" {
			continue
		}
		p := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(p, []byte(opt.Key+": "+yamlText+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		byFile := Default()
		if err := byFile.LoadFile(p); err != nil {
			t.Fatalf("%s: %s: %v", opt.Key, yamlText, err)
		}
		byFile.ConfigFile = ""
		byFlag.MarkGiven(opt.Name) // as the commands do for a flag set (a key in the file is marked by LoadFile)
		if !reflect.DeepEqual(byFile, byFlag) {
			t.Errorf("config %s: %s and --%s %s differ:\n  file %+v\n  flag %+v", opt.Key, yamlText, opt.Name, flagText, byFile, byFlag)
		}
	}
}

// setTyped sets a typed flag target as the flag package parses its text.
func setTyped(p any, text string) error {
	var err error
	switch p := p.(type) {
	case *string:
		*p = text
	case *bool:
		_, err = fmt.Sscan(text, p)
	case *int:
		_, err = fmt.Sscan(text, p)
	case *int64:
		_, err = fmt.Sscan(text, p)
	case *time.Duration:
		*p, err = time.ParseDuration(text)
	default:
		err = fmt.Errorf("target %T", p)
	}
	return err
}

// Every option's own check is the one Validate (or ServeOptions.Validate)
// runs: a bad value of each checked option is reported naming its flag.
func TestEveryCheckNamesItsFlag(t *testing.T) {
	bad := map[string]string{
		"remote": "ftp://h", "remote-token-file": "/nonexistent", "remote-ca": "/nonexistent", "remote-timeout": "0s",
		"remote-max-batch": "0", "remote-batch-wait": "-1s", "remote-max-inflight": "0", "split": "bogus",
		"endpoint-url": "ftp://x", "feature-store-endpoint-url": "x",
		"cache-dir": "", "cache-compression": "zz", "feature-store-compression": "zeros", "cache-size": "1KiB",
		"device": "tpu", "decode": "nvdec", "precision": "fp8", "dtype": "int8", "batch-size": "-1",
		"metadata-ttl": "-1s", "negative-ttl": "-1s", "read-timeout": "-1s", "log-level": "loud",
		"metrics-addr": "nohost", "ort-lib": "/nonexistent/libonnxruntime.so", "image-extensions": "npy",
		"max-pixels": "0", "max-object-size": "0", "decode-memory": "1MiB", "prefetch": "all", "prefetch-limit": "-1",
		"listen": "nohost", "token-file": "/nonexistent", "tls-cert": "/nonexistent", "tls-key": "/nonexistent",
		"max-concurrent": "0", "max-batch-items": "0", "max-request-bytes": "10", "item-timeout": "0s",
		"wire-compression": "zeros", "heartbeat": "0s", "max-conns": "-1", "max-conns-per-peer": "0",
		"write-timeout": "0s", "max-buffered-bytes": "10", "shard": "3/3",
		"labels": "r=/nonexistent/classes.txt", "predictions-top": "0",
	}
	for _, opt := range Table() {
		text, ok := bad[opt.Name]
		if !ok {
			continue
		}
		o := Default()
		o.Models = nil
		if err := o.AddModel("r=" + os.Args[0]); err != nil {
			t.Fatal(err)
		}
		if opt.group == remoteGroup && opt.Name != "remote" {
			o.Remote.URLs = []string{"http://h:7070"}
		}
		switch p := opt.Target(&o).(type) {
		case Value:
			if opt.Name == "remote" {
				o.Remote.URLs = []string{text} // SetURLs takes anything non-empty
			} else if err := p.Set(text); err != nil {
				t.Fatalf("--%s %s: %v", opt.Name, text, err)
			}
		default:
			if err := setTyped(p, text); err != nil {
				t.Fatalf("--%s %s: %v", opt.Name, text, err)
			}
		}
		var err error
		if opt.group == serveGroup {
			err = o.Serve.Validate()
		} else {
			err = o.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), "--"+opt.Name) {
			t.Errorf("--%s %q: Validate = %v, want a problem naming --%s", opt.Name, text, err, opt.Name)
		}
	}
	for name := range bad {
		if Lookup(name) == nil {
			t.Errorf("--%s is not in the table", name)
		}
	}
}

// A config file that is not a map at its top level is reported as such,
// not with the Go type of the file's keys.
func TestConfigTopLevelNotAMap(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("- a\n- b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := Default()
	err := o.LoadFile(p)
	if err == nil || !strings.HasSuffix(err.Error(), "line 1: cannot unmarshal !!seq into the top level") {
		t.Errorf("LoadFile(a list) = %v, want cannot unmarshal !!seq into the top level", err)
	}
}

// TestMemoryLimitSizesDefaults: --memory-limit sizes the bounds left at
// their defaults from its shares, keeps one given explicitly, returns the
// bounds without a flag, and changes nothing when 0; below 128MiB it is
// refused naming the flag.
func TestMemoryLimitSizesDefaults(t *testing.T) {
	o := Default()
	if got := o.ApplyMemoryLimit(); got != (MemorySizes{}) || o.MetadataCacheSize != Default().MetadataCacheSize {
		t.Fatalf("MemoryLimit 0 changed something: %+v, metadata %d", got, o.MetadataCacheSize)
	}
	o.MemoryLimit = 512 * MiB
	o.DecodeMemory = 300 * MiB // given explicitly: kept
	got := o.ApplyMemoryLimit()
	want := MemorySizes{GoLimit: 384 * MiB, Prefetch: 64 * MiB, Handoff: 32 * MiB, CacheWrite: 32 * MiB}
	if got != want {
		t.Errorf("sizes %+v, want %+v", got, want)
	}
	if o.MetadataCacheSize != 128*MiB || o.DecodeMemory != 300*MiB || o.FetchMemory != 32*MiB {
		t.Errorf("metadata %d, decode %d, fetched objects %d; want 128MiB (a quarter), the 300MiB given and 32MiB (a sixteenth)", o.MetadataCacheSize, o.DecodeMemory, o.FetchMemory)
	}
	o = Default()
	o.MemoryLimit = 64 * MiB
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), "--memory-limit") {
		t.Fatalf("Validate of --memory-limit 64MiB: %v; want an error naming the flag", err)
	}
}
