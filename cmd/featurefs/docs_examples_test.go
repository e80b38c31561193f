package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docFiles are the user documentation files whose examples are checked:
// README.md and docs/*.md (not the generated benchmark sections).
func docFiles(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	paths = append(paths, filepath.Join("..", "..", "README.md"))
	out := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimPrefix(p, filepath.Join("..", "..")+string(filepath.Separator))] = string(b)
	}
	return out
}

// commands returns the example command lines of a document that start with
// `featurefs `, continuation lines (ending in \) joined.
func commands(doc string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		l := strings.TrimSpace(line)
		if cur.Len() == 0 && !strings.HasPrefix(l, "featurefs ") {
			continue
		}
		cont := strings.HasSuffix(l, "\\")
		cur.WriteString(strings.TrimSuffix(l, "\\") + " ")
		if !cont {
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		}
	}
	return out
}

// s3Example is an s3:// URL with a concrete (lower-case) bucket name, not
// a placeholder such as s3://BUCKET.
var s3Example = regexp.MustCompile(`(^|\s)s3://[a-z0-9]`)

// etcWrite is a shell redirection into /etc/featurefs.
var etcWrite = regexp.MustCompile(`>>?\s*/etc/featurefs/`)

// TestDocExamplesWorkWithMinIO (issue 24): every example command of mount,
// serve and warm with an s3:// source or feature store in the README and
// docs/ gives --endpoint-url, which MinIO and other S3-compatible stores
// need (the examples used to leave it out); every example that writes a
// file under /etc/featurefs creates the directory first (docs/SERVE.md
// wrote /etc/featurefs/token without mkdir -p).
func TestDocExamplesWorkWithMinIO(t *testing.T) {
	checked := 0
	for name, doc := range docFiles(t) {
		for _, c := range commands(doc) {
			verb := strings.Fields(c)[1]
			if verb != "mount" && verb != "serve" && verb != "warm" || !s3Example.MatchString(c) {
				continue
			}
			checked++
			if !strings.Contains(c, "--endpoint-url ") {
				t.Errorf("%s: an S3 example without --endpoint-url (MinIO users need it): %s", name, c)
			}
		}
		lines := strings.Split(doc, "\n")
		for i, l := range lines {
			if !etcWrite.MatchString(l) {
				continue
			}
			before := strings.Join(lines[max(0, i-3):i+1], "\n")
			if !strings.Contains(before, "mkdir -p /etc/featurefs") {
				t.Errorf("%s:%d: writes under /etc/featurefs without mkdir -p /etc/featurefs first: %s", name, i+1, strings.TrimSpace(l))
			}
		}
	}
	if checked < 5 {
		t.Errorf("only %d S3 example commands found in the docs: the scan is broken", checked)
	}
}
