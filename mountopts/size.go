package mountopts

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Size units. Binary (powers of 1024).
const (
	KiB int64 = 1 << (10 * (iota + 1))
	MiB
	GiB
	TiB
)

// unitMultiplier returns the multiplier of a lower-cased size suffix. The
// IEC forms (KiB, MiB, ...) and the bare letters (K, M, G, T, as dd, sort and
// rclone read them) are binary; KB, MB, GB and TB are SI (powers of 1000), as
// disk vendors use them.
func unitMultiplier(unit string) (int64, bool) {
	switch unit {
	case "", "b":
		return 1, true
	case "k", "kib":
		return KiB, true
	case "m", "mib":
		return MiB, true
	case "g", "gib":
		return GiB, true
	case "t", "tib":
		return TiB, true
	case "kb":
		return 1e3, true
	case "mb":
		return 1e6, true
	case "gb":
		return 1e9, true
	case "tb":
		return 1e12, true
	}
	return 0, false
}

// ParseSize parses a byte count: a plain number of bytes ("1048576"), or a
// number (fractions allowed) with a unit: KiB, MiB, GiB, TiB or K, M, G, T
// (powers of 1024), KB, MB, GB, TB (powers of 1000), or B. Units are
// case-insensitive and may follow a space: "10GiB", "512 MiB", "10G",
// "1.5GiB". Negative sizes are an error.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		return 0, fmt.Errorf("size %q: want a number of bytes or a number with a unit such as 512MiB or 10GiB", s)
	}
	mult, ok := unitMultiplier(unit)
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (use B, KiB, MiB, GiB, TiB, K, M, G, T, KB, MB, GB or TB)", s, t[i:])
	}
	if !strings.Contains(num, ".") {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("size %q: %w", s, err)
		}
		if n > math.MaxInt64/mult {
			return 0, fmt.Errorf("size %q: too large", s)
		}
		return n * mult, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	v := f * float64(mult)
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return int64(math.Round(v)), nil
}

// FormatSize renders n bytes with the largest binary unit that keeps it
// readable: "10GiB", "1.5GiB", "512MiB", "100B". ParseSize reads it back
// (exactly when it has no fraction; fractions keep two decimals).
func FormatSize(n int64) string {
	units := []struct {
		name string
		mult int64
	}{{"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}}
	neg := ""
	if n < 0 {
		neg, n = "-", -n
	}
	for _, u := range units {
		if n < u.mult {
			continue
		}
		if n%u.mult == 0 {
			return fmt.Sprintf("%s%d%s", neg, n/u.mult, u.name)
		}
		f := strconv.FormatFloat(float64(n)/float64(u.mult), 'f', 2, 64)
		f = strings.TrimRight(strings.TrimRight(f, "0"), ".")
		return neg + f + u.name
	}
	return fmt.Sprintf("%s%dB", neg, n)
}
