package spec

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// DeviceSyntax is the form --device takes, for messages.
const DeviceSyntax = "want auto, cpu, cuda, cuda:N or cuda:N,M,..."

// ParseDevice parses --device: auto (or ""), cpu, cuda, or cuda:N[,M,...]
// (case and spaces ignored; each index may repeat the prefix:
// cuda:0,cuda:2). indices is nil for auto, cpu and cuda (every usable
// GPU), else the GPUs named, in the order given. A repeated index, a
// negative one or anything else is an error (without the flag's name).
func ParseDevice(s string) (kind string, indices []int, err error) {
	s = strings.ToLower(strings.TrimSpace(s))
	switch {
	case s == "" || s == "auto":
		return "auto", nil, nil
	case s == "cpu" || s == "cuda":
		return s, nil, nil
	case strings.HasPrefix(s, "cuda:"):
		for item := range strings.SplitSeq(s[len("cuda:"):], ",") {
			item = strings.TrimPrefix(strings.TrimSpace(item), "cuda:")
			n, err := strconv.Atoi(item)
			if err != nil || n < 0 {
				return "", nil, fmt.Errorf("%q is not a GPU number; %s", item, DeviceSyntax)
			}
			if slices.Contains(indices, n) {
				return "", nil, fmt.Errorf("cuda:%d given twice", n)
			}
			indices = append(indices, n)
		}
		return "cuda", indices, nil
	}
	return "", nil, errors.New(DeviceSyntax)
}
