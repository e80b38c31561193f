package test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// TestMemoryLimitTooSmallIsRefused: a --memory-limit the models cannot
// run in is refused at start, exit 2, with the figure they need (ResNet-50:
// its graph, opening its largest session and the process's base), before
// anything is mounted.
func TestMemoryLimitTooSmallIsRefused(t *testing.T) {
	model := testenv.Model(t, "resnet50")
	d := genDataset(t, "--classes", "1", "--train", "1", "--val", "0")
	mnt := t.TempDir()
	r := runCLI(t, time.Minute, nil, "mount", "--device", "cpu", "--model", "resnet50="+model,
		"--cache-dir", t.TempDir(), "--memory-limit", "256MiB", d.Dir, mnt)
	if r.Code == 0 {
		time.Sleep(time.Second) // the background mount's process
		syscall.Unmount(mnt, syscall.MNT_DETACH)
	}
	if r.Code != 2 {
		t.Fatalf("mount --memory-limit 256MiB of ResNet-50: exit %d, want 2: %s", r.Code, r)
	}
	for _, want := range []string{"--memory-limit 256MiB", "at least", "MiB"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("the refusal does not say %q: %s", want, r.Stderr)
		}
	}
	if mounts := fuseMountsUnder(t, mnt); len(mounts) != 0 {
		t.Errorf("a refused mount left %v", mounts)
	}
}

// TestMemoryLimitHoldsInAContainer: the image make image builds, run by
// podman with --memory L (no swap) and the mount's --memory-limit L,
// ResNet-50 on a volume, reads layer12 and layer18 of 24 images twice
// (featurefs warm through the mount, in the same container, so its memory
// counts too) and is never OOM-killed; the mount's peak resident set
// (VmHWM, the stats file's peak_rss_bytes) stays within L. A machine
// without podman fails the test (newPodman).
func TestMemoryLimitHoldsInAContainer(t *testing.T) {
	p := newPodman(t)
	tar := filepath.Join(p.dir, "featurefs-image.tar")
	buildImage(t, tar)
	p.run(3*time.Minute, "load", "-q", "-i", tar)
	ds := genDataset(t, "--classes", "2", "--train", "12", "--val", "0", "--formats", "jpg")
	models := filepath.Join(t.TempDir(), "models")
	mkdirMode(t, models, 0o755)
	if b, err := os.ReadFile(testenv.Model(t, "resnet50")); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(filepath.Join(models, "resnet50.onnx"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		limit string
		bytes int64
	}{
		// 512MiB was OOM-killed when layer18's session opened while the
		// parsed graph held the model file's bytes (peak 543 MiB by
		// docs/records/memory.md); with the weights read back from the file
		// when a session opens it held, by too little (peaks 474-517 MiB,
		// over the limit in a .ci/run); with the pruned model piped to
		// ONNX Runtime, never held whole, 387-408 MiB.
		{"512MiB", 512 << 20},
		{"1GiB", 1 << 30},
	} {
		limit, bytes := tc.limit, tc.bytes
		t.Run(limit, func(t *testing.T) {
			name := "featurefs-memlimit-" + strings.ToLower(limit)
			mnt := filepath.Join(t.TempDir(), "mnt")
			mkdirMode(t, mnt, 0o755)
			p.run(time.Minute, "run", "--detach", "--name", name, "--pull", "never", "--network", "none",
				"--memory", fmt.Sprint(bytes), "--memory-swap", fmt.Sprint(bytes),
				"--privileged", "--user", "0", "--device", p.fuseDevice(t)+":/dev/fuse",
				"--volume", models+":/models:ro", "--volume", ds.Dir+":/data:ro",
				"--volume", t.TempDir()+":/var/cache/featurefs", "--volume", mnt+":/mnt/features",
				"--entrypoint", "featurefs", "featurefs:latest",
				"mount", "--foreground", "--device", "cpu", "--memory-limit", limit,
				"--model", "resnet50=/models/resnet50.onnx", "--cache-dir", "/var/cache/featurefs", "/data", "/mnt/features")
			defer p.try(time.Minute, "rm", "--force", "--time", "0", name)
			deadline := time.Now().Add(2 * time.Minute)
			for {
				if _, err := p.try(30*time.Second, "exec", name, "featurefs", "stats", "/mnt/features"); err == nil {
					break
				} else if time.Now().After(deadline) {
					logs, _ := p.try(time.Minute, "logs", name)
					t.Fatalf("the mount in the container did not answer in 2 minutes: %v\n%s", err, lastBytes(logs, 3000))
				}
				time.Sleep(time.Second)
			}
			for epoch := range 2 {
				for _, layer := range []string{"layer12", "layer18"} {
					out, err := p.try(5*time.Minute, "exec", name, "featurefs", "warm", "--jobs", "8", "/mnt/features/features/resnet50/"+layer)
					if err != nil {
						st, _ := p.try(time.Minute, "inspect", "--format", "{{.State.OOMKilled}} {{.State.Status}} {{.State.ExitCode}}", name)
						logs, _ := p.try(time.Minute, "logs", name)
						t.Fatalf("epoch %d %s: warm through the mount: %v\n%s\ncontainer (OOM-killed, status, exit): %s\n%s",
							epoch+1, layer, err, out, st, lastBytes(logs, 3000))
					}
				}
			}
			st := p.run(time.Minute, "inspect", "--format", "{{.State.OOMKilled}} {{.State.Status}}", name)
			if strings.TrimSpace(st) != "false running" {
				t.Fatalf("the container after the epochs (OOM-killed, status): %s", st)
			}
			raw := p.run(time.Minute, "exec", name, "featurefs", "stats", "--json", "/mnt/features")
			var stats struct {
				Memory struct {
					PeakRSS int64 `json:"peak_rss_bytes"`
					RSS     int64 `json:"rss_bytes"`
				} `json:"memory"`
			}
			var all struct {
				Memory json.RawMessage `json:"memory"`
			}
			if err := json.Unmarshal([]byte(raw), &stats); err != nil {
				t.Fatalf("stats --json: %v\n%s", err, raw)
			}
			json.Unmarshal([]byte(raw), &all)
			t.Logf("--memory-limit %s: peak RSS %d MiB, RSS %d MiB", limit, stats.Memory.PeakRSS>>20, stats.Memory.RSS>>20)
			if stats.Memory.PeakRSS > bytes {
				// Once in a .ci/run at 840e909 (529 MiB; 354-420 MiB in
				// 5 runs here, 2 beside a CPU burner, 2 beside the
				// extractor's tests): the whole memory figure, anonymous
				// and file pages apart, says what grew.
				t.Errorf("--memory-limit %s: the mount's peak RSS (VmHWM) was %d MiB; memory now: %s", limit, stats.Memory.PeakRSS>>20, all.Memory)
			}
			// A regression bound under the 1GiB limit: 376-414 MiB measured
			// with the pruned model piped to ONNX Runtime, 426-521 MiB
			// with it held whole while ONNX Runtime parsed it (Go's soft
			// limit 768 MiB), 542-562 MiB while the graph held the whole
			// file, 779-819 MiB before the C heap was bounded. The 512MiB
			// case is held to its limit above.
			if peak := stats.Memory.PeakRSS; peak > 640<<20 {
				t.Errorf("--memory-limit %s: peak RSS %d MiB, over the 640 MiB this build measured well under (376-414; 779-819 before the C heap was bounded)", limit, peak>>20)
			}
		})
	}
}
