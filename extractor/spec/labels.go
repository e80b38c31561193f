package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// MaxLabelBytes is the longest class name a labels file may hold, in
// bytes: a name is copied into every predictions line that lists its
// class, so a longer one is refused rather than padding each line.
const MaxLabelBytes = 256

// MaxLabelsFileBytes is the largest labels file read: room for 65,536
// names of MaxLabelBytes. A larger file (or a device, FIFO or directory)
// is refused before it is read whole.
const MaxLabelsFileBytes = 16 << 20

// ReadLabels reads a labels file (--labels NAME=FILE): the class names of a
// model whose last layer is class scores, in class order (ParseLabels).
// Only a regular file of at most MaxLabelsFileBytes is read.
func ReadLabels(path string) ([]string, error) {
	b, err := readLabelsFile(path)
	if err != nil {
		return nil, fmt.Errorf("labels file: %w", err)
	}
	names, err := ParseLabels(b)
	if err != nil {
		return nil, fmt.Errorf("labels file %s: %w", path, err)
	}
	return names, nil
}

// readLabelsFile reads path if it is a regular file of at most
// MaxLabelsFileBytes (ReadRegular: without blocking on a FIFO).
func readLabelsFile(path string) ([]byte, error) {
	b, err := ReadRegular(path, MaxLabelsFileBytes)
	if errors.Is(err, ErrFileTooLarge) {
		return nil, fmt.Errorf("%w (a labels file holds at most %d bytes, names of at most %d bytes)", err, MaxLabelsFileBytes, MaxLabelBytes)
	}
	return b, err
}

// ParseLabels parses the class names of a labels file: a JSON list of
// strings (when the file starts with '['), or one name per line (a final
// newline, CRLF line ends and blank lines at the end are allowed; a blank
// line between names is not, since it would shift every later class). A
// name is at most MaxLabelBytes bytes, a file at most MaxLabelsFileBytes.
func ParseLabels(b []byte) ([]string, error) {
	if len(b) > MaxLabelsFileBytes {
		return nil, fmt.Errorf("%d bytes, over %d", len(b), MaxLabelsFileBytes)
	}
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
			if len(n) > MaxLabelBytes {
				return nil, fmt.Errorf("class %d's name is %d bytes, over %d", i, len(n), MaxLabelBytes)
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
		if len(l) > MaxLabelBytes {
			return nil, fmt.Errorf("line %d is %d bytes, over %d (class %d's name)", i+1, len(l), MaxLabelBytes, i)
		}
		lines[i] = l
	}
	return lines, nil
}
