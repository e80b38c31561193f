package mountopts

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// fileSections are the parts of the config file with a fixed set of keys:
// the Go type yaml.v3 names in its errors, what the user calls the part,
// and its keys.
var fileSections = []struct {
	goType string
	where  string
	keys   []string
}{
	{fileType.String(), "", yamlKeys(reflect.New(fileType).Elem().Interface())},
	{reflect.TypeOf(fileModel{}).String(), " in a model (models: NAME:)", yamlKeys(fileModel{})},
	{reflect.TypeOf(filePreprocess{}).String(), " in a model's preprocess:", yamlKeys(filePreprocess{})},
}

// yamlKeys returns the sorted yaml keys of struct v's fields.
func yamlKeys(v any) []string {
	t := reflect.TypeOf(v)
	var keys []string
	for i := range t.NumField() {
		if k, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); k != "" && k != "-" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// unknownField is yaml.v3's line for a key that no field takes.
// The config file's own type is a struct literal type (fileType), with
// spaces.
var unknownField = regexp.MustCompile(`^line (\d+): field (.*?) not found in type (.+)$`)

// explainFileError rewrites a config-file decoding error for a user: each
// unknown key is named with the keys valid where it stands (and the
// nearest, when one is a likely typo), instead of a Go type
// (fileType); other problems keep yaml's words with Go type
// names replaced by the part of the file they stand for. Errors that are
// not a *yaml.TypeError are returned as they are.
func explainFileError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	msgs := make([]string, 0, len(te.Errors))
	for _, e := range te.Errors {
		msgs = append(msgs, explainFileLine(e))
	}
	return &fileKeyError{msg: strings.Join(msgs, "\n"), err: err}
}

// explainFileLine is explainFileError for one of yaml's lines.
func explainFileLine(line string) string {
	if m := unknownField.FindStringSubmatch(line); m != nil {
		for _, s := range fileSections {
			if s.goType != m[3] {
				continue
			}
			msg := fmt.Sprintf("line %s: unknown key %q%s", m[1], m[2], s.where)
			if near := nearestKey(m[2], s.keys); near != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", near)
			}
			return msg + "; valid keys: " + strings.Join(s.keys, ", ")
		}
	}
	// The top level's type first: its text holds the others'.
	line = strings.ReplaceAll(line, fileSections[0].goType, "the top level")
	line = strings.ReplaceAll(line, "map[string]"+fileSections[1].goType, "models: (a map of NAME: {path: ..., ...})")
	for _, s := range fileSections {
		what := "the top level"
		if s.where != "" {
			what = strings.TrimSuffix(strings.TrimPrefix(s.where, " in "), ":")
		}
		line = strings.ReplaceAll(line, s.goType, what)
	}
	return line
}

// nearestKey returns the key within edit distance 2 of k (after '_' is
// read as '-' and case is ignored) that is nearest, or "".
func nearestKey(k string, keys []string) string {
	norm := strings.ToLower(strings.ReplaceAll(k, "_", "-"))
	best, bestD := "", 3
	for _, c := range keys {
		if d := editDistance(norm, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// fileKeyError is a config file's decoding error as explainFileError
// words it; it unwraps to yaml's error.
type fileKeyError struct {
	msg string
	err error
}

func (e *fileKeyError) Error() string { return e.msg }
func (e *fileKeyError) Unwrap() error { return e.err }
