// Command mkimage builds featurefs's container image (make image; issue
// 40) offline: an OCI image layout, written as one tar archive (what
// `podman load` and `docker load` read), of a single layer holding the
// featurefs binary, ONNX Runtime's CPU library, the shared libraries both
// need (found with ldd on this Debian machine, so the image runs what was
// built and tested here), fusermount3 (setuid, for a mount by the
// non-root user), the CA certificates, and a passwd/group with root and
// featurefs (65532), the image's default user. No model: mount one at
// /models, or add a layer (docs/KUBERNETES.md).
//
// Reproducible: the same inputs give the same bytes (entries sorted,
// owners and times fixed to SOURCE_DATE_EPOCH or 0, gzip without a name
// or time), so the same digest.
//
//	go run ./scripts/mkimage -bin bin/featurefs -ort $FEATUREFS_ORT_LIB -o bin/featurefs-image.tar
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/featurefs/featurefs/cache/safefile"
)

// Where things go in the image.
const (
	binPath   = "/usr/local/bin/featurefs"
	ortDir    = "/usr/local/lib/onnxruntime"
	userID    = 65532
	userName  = "featurefs"
	homeDir   = "/home/featurefs"
	imageName = "featurefs:latest"
)

// entry is one file system entry of the layer.
type entry struct {
	name     string // absolute path in the image
	typ      byte   // tar.TypeReg, TypeDir, TypeSymlink
	mode     int64
	uid, gid int
	data     []byte // a regular file's content
	link     string // a symlink's target
}

func main() {
	bin := flag.String("bin", "bin/featurefs", "the featurefs binary")
	ort := flag.String("ort", os.Getenv("FEATUREFS_ORT_LIB"), "ONNX Runtime's libonnxruntime.so.1 (its providers_shared library beside it is taken too)")
	out := flag.String("o", "bin/featurefs-image.tar", "the OCI image layout archive to write")
	flag.Parse()
	if err := run(*bin, *ort, *out); err != nil {
		fmt.Fprintf(os.Stderr, "mkimage: %v\n", err)
		os.Exit(1)
	}
}

func run(bin, ort, out string) error {
	if ort == "" {
		return errors.New("-ort (or FEATUREFS_ORT_LIB) names no ONNX Runtime library")
	}
	epoch, err := sourceEpoch()
	if err != nil {
		return err
	}
	entries, err := collect(bin, ort)
	if err != nil {
		return err
	}
	b, err := Build(entries, epoch)
	if err != nil {
		return err
	}
	// Through a temporary file and a rename; a symbolic link at out is
	// refused, never written through.
	if err := safefile.WriteFile(out, b, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "mkimage: wrote %s (%s, %d bytes)\n", out, imageName, len(b))
	return nil
}

// sourceEpoch is SOURCE_DATE_EPOCH (the reproducible-builds convention)
// or 0.
func sourceEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want seconds since 1970", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

// collect lists the image's entries from this machine's files.
func collect(bin, ort string) ([]entry, error) {
	var es []entry
	add := func(name, host string, mode int64) error {
		b, err := os.ReadFile(host) // follows a symlink: the image gets the file
		if err != nil {
			return err
		}
		es = append(es, entry{name: name, typ: tar.TypeReg, mode: mode, data: b})
		return nil
	}
	if err := add(binPath, bin, 0o755); err != nil {
		return nil, err
	}
	ortLib := ortDir + "/libonnxruntime.so.1"
	if err := add(ortLib, ort, 0o755); err != nil {
		return nil, err
	}
	if shared := filepath.Join(filepath.Dir(ort), "libonnxruntime_providers_shared.so"); exists(shared) {
		if err := add(ortDir+"/libonnxruntime_providers_shared.so", shared, 0o755); err != nil {
			return nil, err
		}
	}
	fusermount, _ := exec.LookPath("fusermount3")
	// The shared libraries the binaries load, under the paths ldd names
	// (the dynamic loader's own path included).
	libs := map[string]bool{}
	for _, f := range []string{bin, ort, fusermount} {
		if f == "" {
			continue
		}
		out, err := exec.Command("ldd", f).Output()
		if err != nil {
			return nil, fmt.Errorf("ldd %s: %w", f, err)
		}
		for _, p := range ParseLdd(string(out)) {
			libs[p] = true
		}
	}
	for p := range libs {
		if err := add(p, p, 0o755); err != nil {
			return nil, err
		}
	}
	if fusermount != "" {
		// Setuid root: a mount by the non-root user goes through it.
		if err := add("/usr/bin/fusermount3", fusermount, 0o4755); err != nil {
			return nil, err
		}
	}
	if err := add("/etc/ssl/certs/ca-certificates.crt", "/etc/ssl/certs/ca-certificates.crt", 0o644); err != nil {
		return nil, err
	}
	id := strconv.Itoa(userID)
	es = append(es,
		entry{name: "/etc/passwd", typ: tar.TypeReg, mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\n" +
			userName + ":x:" + id + ":" + id + ":featurefs:" + homeDir + ":/sbin/nologin\n")},
		entry{name: "/etc/group", typ: tar.TypeReg, mode: 0o644, data: []byte("root:x:0:\n" + userName + ":x:" + id + ":\n")},
		// mount(8)'s fuse.conf: let --allow-other work for the non-root user.
		entry{name: "/etc/fuse.conf", typ: tar.TypeReg, mode: 0o644, data: []byte("user_allow_other\n")},
		// fusermount3 reads /etc/mtab to unmount: without it a mount by
		// the non-root user cannot be unmounted ("failed to open
		// /etc/mtab") and stays after the process exits.
		entry{name: "/etc/mtab", typ: tar.TypeSymlink, mode: 0o777, link: "/proc/self/mounts"},
		entry{name: homeDir, typ: tar.TypeDir, mode: 0o700, uid: userID, gid: userID},
		entry{name: "/tmp", typ: tar.TypeDir, mode: 0o1777},
		entry{name: "/models", typ: tar.TypeDir, mode: 0o755},
		entry{name: "/mnt/features", typ: tar.TypeDir, mode: 0o755, uid: userID, gid: userID},
		entry{name: "/var/cache/featurefs", typ: tar.TypeDir, mode: 0o700, uid: userID, gid: userID},
		entry{name: "/dev", typ: tar.TypeDir, mode: 0o755},
		entry{name: "/proc", typ: tar.TypeDir, mode: 0o555},
		entry{name: "/sys", typ: tar.TypeDir, mode: 0o555},
	)
	return es, nil
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// ParseLdd returns the absolute paths of the libraries in ldd's output
// ("libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)", and the
// loader's "/lib64/ld-linux-x86-64.so.2 (0x...)"); the vDSO and lines
// without an absolute, clean path are left out.
func ParseLdd(out string) []string {
	var ps []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		var p string
		switch {
		case len(f) >= 3 && f[1] == "=>":
			p = f[2]
		case len(f) >= 1:
			p = f[0]
		}
		if !strings.HasPrefix(p, "/") || path.Clean(p) != p || p == "/" {
			continue
		}
		ps = append(ps, p)
	}
	sort.Strings(ps)
	return ps
}

// Build returns the OCI image layout archive of the entries: one gzipped
// layer, its config (entrypoint featurefs, user featurefs, ONNX Runtime's
// path in FEATUREFS_ORT_LIB) and manifest, and an index naming it
// featurefs:latest. Equal entries and epoch give equal bytes.
func Build(entries []entry, epoch time.Time) ([]byte, error) {
	layer, diffID, err := layerTar(entries, epoch)
	if err != nil {
		return nil, err
	}
	config := map[string]any{
		"architecture": goarch(),
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config": map[string]any{
			"User":       strconv.Itoa(userID) + ":" + strconv.Itoa(userID),
			"Entrypoint": []string{binPath},
			"Cmd":        []string{"doctor"},
			"Env": []string{
				"PATH=/usr/local/bin:/usr/bin:/bin",
				"HOME=" + homeDir,
				"FEATUREFS_ORT_LIB=" + ortDir + "/libonnxruntime.so.1",
			},
			"WorkingDir": "/",
			"Labels":     map[string]string{"org.opencontainers.image.title": "featurefs"},
		},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{diffID}},
		"history": []map[string]string{{"created": epoch.Format(time.RFC3339), "created_by": "featurefs make image (scripts/mkimage)"}},
	}
	cfg, err := json.Marshal(config)
	if err != nil {
		return nil, err
	}
	desc := func(mt string, b []byte) map[string]any {
		return map[string]any{"mediaType": mt, "digest": digest(b), "size": len(b)}
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        desc("application/vnd.oci.image.config.v1+json", cfg),
		"layers":        []any{desc("application/vnd.oci.image.layer.v1.tar+gzip", layer)},
	})
	if err != nil {
		return nil, err
	}
	md := desc("application/vnd.oci.image.manifest.v1+json", manifest)
	md["annotations"] = map[string]string{
		"org.opencontainers.image.ref.name": "latest",
		"io.containerd.image.name":          "docker.io/library/" + imageName,
	}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []any{md}})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	put := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	blobs := [][]byte{cfg, layer, manifest}
	sort.Slice(blobs, func(i, j int) bool { return digest(blobs[i]) < digest(blobs[j]) })
	if err := tw.WriteHeader(&tar.Header{Name: "blobs/", Mode: 0o755, ModTime: epoch, Typeflag: tar.TypeDir, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	if err := tw.WriteHeader(&tar.Header{Name: "blobs/sha256/", Mode: 0o755, ModTime: epoch, Typeflag: tar.TypeDir, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	for _, b := range blobs {
		if err := put("blobs/sha256/"+strings.TrimPrefix(digest(b), "sha256:"), b); err != nil {
			return nil, err
		}
	}
	if err := put("index.json", index); err != nil {
		return nil, err
	}
	if err := put("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// layerTar returns the gzipped layer of the entries (their parent
// directories added, sorted by path) and its diff ID (the digest of the
// uncompressed tar).
func layerTar(entries []entry, epoch time.Time) ([]byte, string, error) {
	all := map[string]entry{}
	for _, e := range entries {
		if !path.IsAbs(e.name) || path.Clean(e.name) != e.name {
			return nil, "", fmt.Errorf("entry %q: not a clean absolute path", e.name)
		}
		all[e.name] = e
		for d := path.Dir(e.name); d != "/"; d = path.Dir(d) {
			if _, ok := all[d]; !ok {
				all[d] = entry{name: d, typ: tar.TypeDir, mode: 0o755}
			}
		}
	}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, n := range names {
		e := all[n]
		h := &tar.Header{Name: strings.TrimPrefix(n, "/"), Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: epoch, Typeflag: e.typ, Format: tar.FormatPAX}
		switch e.typ {
		case tar.TypeDir:
			h.Name += "/"
		case tar.TypeReg:
			h.Size = int64(len(e.data))
		case tar.TypeSymlink:
			h.Linkname = e.link
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, "", err
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write(e.data); err != nil {
				return nil, "", err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return nil, "", err
	}
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return nil, "", err
	}
	if err := zw.Close(); err != nil {
		return nil, "", err
	}
	return gz.Bytes(), digest(raw.Bytes()), nil
}

// goarch is the image's architecture: this machine's, whose binary and
// libraries it holds.
func goarch() string { return runtime.GOARCH }
