package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
)

// ReadLabels reads a labels file (--labels NAME=FILE): the class names of a
// model whose last layer is class scores, in class order (ParseLabels).
func ReadLabels(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("labels file: %w", err)
	}
	names, err := ParseLabels(b)
	if err != nil {
		return nil, fmt.Errorf("labels file %s: %w", path, err)
	}
	return names, nil
}

// ParseLabels parses the class names of a labels file: a JSON list of
// strings (when the file starts with '['), or one name per line (a final
// newline, CRLF line ends and blank lines at the end are allowed; a blank
// line between names is not, since it would shift every later class).
func ParseLabels(b []byte) ([]string, error) {
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark
	t := bytes.TrimSpace(b)
	if len(t) == 0 {
		return nil, errors.New("no class names (want one per line, or a JSON list)")
	}
	var names []string
	if t[0] == '[' {
		if err := json.Unmarshal(t, &names); err != nil {
			return nil, fmt.Errorf("not a JSON list of strings: %w", err)
		}
		if len(names) == 0 {
			return nil, errors.New("the JSON list is empty")
		}
		for i, n := range names {
			if strings.TrimSpace(n) == "" {
				return nil, fmt.Errorf("class %d has an empty name", i)
			}
		}
		return names, nil
	}
	lines := strings.Split(strings.TrimRight(string(b), " \t\r\n"), "\n")
	for i, l := range lines {
		l = strings.TrimSuffix(l, "\r")
		if strings.TrimSpace(l) == "" {
			return nil, fmt.Errorf("line %d is blank (class %d would have no name)", i+1, i)
		}
		lines[i] = l
	}
	return lines, nil
}
