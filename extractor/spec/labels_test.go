package spec

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseLabels(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
		err      string
	}{
		{"lines", "cat\ndog\n", []string{"cat", "dog"}, ""},
		{"crlf and trailing blanks", "cat\r\ndog house\r\n\r\n\n", []string{"cat", "dog house"}, ""},
		{"no final newline", "a\nb", []string{"a", "b"}, ""},
		{"bom", "\xef\xbb\xbfa\nb\n", []string{"a", "b"}, ""},
		{"json", ` ["tench", "goldfish, Carassius auratus"]`, []string{"tench", "goldfish, Carassius auratus"}, ""},
		{"empty", "\n\n", nil, "no class names"},
		{"blank inside", "a\n\nb\n", nil, "line 2 is blank"},
		{"bad json", `["a", 3]`, nil, "not a JSON list"},
		{"empty json", `[]`, nil, "empty"},
		{"empty json name", `["a", " "]`, nil, "class 1 has an empty name"},
	} {
		got, err := ParseLabels([]byte(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want one containing %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

func TestReadLabelsNamesTheFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.txt")
	if _, err := ReadLabels(missing); err == nil || !strings.Contains(err.Error(), "nope.txt") {
		t.Errorf("missing file: %v", err)
	}
	p := filepath.Join(t.TempDir(), "l.txt")
	if err := os.WriteFile(p, []byte("a\n\nb"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadLabels(p); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad file: %v", err)
	}
}
