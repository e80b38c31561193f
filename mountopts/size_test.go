package mountopts

import "testing"

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"1048576", 1 << 20},
		{"100B", 100},
		{"10GiB", 10 << 30},
		{"10gib", 10 << 30},
		{"512MiB", 512 << 20},
		{"512 MiB", 512 << 20},
		{"10G", 10 << 30},
		{"4k", 4096},
		{"1.5GiB", 3 << 29},
		{"2TiB", 2 << 40},
		{"1GB", 1_000_000_000},
		{"3MB", 3_000_000},
	} {
		got, err := ParseSize(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "GiB", "-1", "10XB", "1.2.3G", "99999999999TiB", "ten"} {
		if n, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, n)
		}
	}
}

func TestFormatSizeRoundTrip(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{100, "100B"}, {10 << 30, "10GiB"}, {512 << 20, "512MiB"}, {3 << 29, "1.5GiB"}, {1 << 40, "1TiB"}, {1536, "1.5KiB"},
	} {
		s := FormatSize(c.n)
		if s != c.want {
			t.Errorf("FormatSize(%d) = %q, want %q", c.n, s, c.want)
		}
		back, err := ParseSize(s)
		if err != nil || back != c.n {
			t.Errorf("ParseSize(FormatSize(%d)=%q) = %d, %v", c.n, s, back, err)
		}
	}
}
