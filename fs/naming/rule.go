package naming

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/featurefs/featurefs/extractor/spec"
)

// NPYExt is the extension of every feature file.
const NPYExt = ".npy"

// NameMax is the longest name a directory entry may have (NAME_MAX).
const NameMax = 255

// hashDigits is how many hex digits of SHA-256 a shortened name carries.
const hashDigits = 16

// Rule applies the naming rule for a set of image extensions. Constant
// after construction; safe for concurrent use.
type Rule struct {
	exts []string // lower case (ASCII), no dot
	// maxTail is the largest "<ext>.npy/" (or "npy/"): every key that can
	// decide the names of stem S sorts at or below "S."+maxTail.
	maxTail string
	// archives are the archive extensions (lower case, no dot) whose
	// prefixes are shown without them (WithArchives).
	archives []string
}

// WithArchives returns the rule that also shows a prefix "NAME.<ext>/" of
// an archive extension (tar, zip; any ASCII case) as the directory NAME,
// as fs/archive lists an archive object: unless a prefix NAME/ or another
// archive of the same NAME is beside it, where each keeps its own name.
func (n Rule) WithArchives(exts []string) Rule {
	n.archives = nil
	for _, e := range exts {
		if e = asciiLower(strings.TrimPrefix(e, ".")); e != "" && !slices.Contains(n.archives, e) {
			n.archives = append(n.archives, e)
		}
	}
	return n
}

// inArchive reports whether prefix ("a/b/") has a component named like
// an archive: only there can an object be plain (an archive's sidecar).
func (n Rule) inArchive(prefix string) bool {
	for c := range strings.SplitSeq(strings.TrimSuffix(prefix, "/"), "/") {
		if i := strings.LastIndexByte(c, '.'); i > 0 && slices.Contains(n.archives, asciiLower(c[i+1:])) {
			return true
		}
	}
	return false
}

// archiveStem returns the name a prefix component d is shown under when
// it is an archive's: d without its archive extension. A stem that could
// be a feature file's name (X.npy) or is no valid name keeps d.
func (n Rule) archiveStem(d string) (string, bool) {
	i := strings.LastIndexByte(d, '.')
	if i <= 0 || !slices.Contains(n.archives, asciiLower(d[i+1:])) {
		return "", false
	}
	stem := d[:i]
	if !ValidName(stem) || strings.HasSuffix(asciiLower(stem), NPYExt) {
		return "", false
	}
	return stem, true
}

// New returns the rule for image extensions exts (any ASCII case, with or
// without a leading dot; empty ones and repeats are dropped). With none,
// no key is an image.
func New(exts []string) Rule {
	n := Rule{maxTail: "npy/"}
	for _, e := range exts {
		e = asciiLower(strings.TrimPrefix(e, "."))
		if e == "" || slices.Contains(n.exts, e) {
			continue
		}
		n.exts = append(n.exts, e)
		n.maxTail = max(n.maxTail, e+NPYExt+"/")
	}
	return n
}

// Split reports whether base (a key's last component) ends in an image
// extension (in any ASCII case), and returns its stem (without the dot,
// possibly empty: ".jpg" is an image of stem "").
func (n Rule) Split(base string) (stem string, ok bool) {
	stem, _, ok = n.Parts(base)
	return stem, ok
}

// Parts is Split that also returns the extension (as written, without the
// dot).
func (n Rule) Parts(base string) (stem, ext string, ok bool) {
	if len(n.exts) == 0 { // spec's nil means its defaults; here, no image
		return "", "", false
	}
	return spec.SplitImage(base, n.exts)
}

// variants returns the keys of stem key S ("prefix/S") that can share its
// short name: S.ext for every extension, in lower and in upper case.
func (n Rule) variants(stemKey string) []string {
	var keys []string
	for _, e := range n.exts {
		keys = append(keys, stemKey+"."+e)
		if u := asciiUpper(e); u != e {
			keys = append(keys, stemKey+"."+u)
		}
	}
	return keys
}

// PlainCase reports whether an extension is all lower or all upper case:
// only such images can have a short name (a.Png is always a.Png.npy), so
// that the keys that can share a short name are few enough to Stat.
func PlainCase(ext string) bool { return ext == asciiLower(ext) || ext == asciiUpper(ext) }

func asciiLower(s string) string {
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}

func asciiUpper(s string) string {
	return strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' {
			return r - 'a' + 'A'
		}
		return r
	}, s)
}

// hashLike reports whether a name has the form of a shortened name:
// "~" and 16 lower-case hex digits at the end, or just before ".npy".
// Only shortened names have it: a directory or file whose own name has it
// is shortened too, so shortened names collide with nothing.
func hashLike(name string) bool {
	s := strings.TrimSuffix(name, NPYExt)
	if len(s) < hashDigits+1 || s[len(s)-hashDigits-1] != '~' {
		return false
	}
	for _, c := range []byte(s[len(s)-hashDigits:]) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Usable reports whether a name can be shown as it is: a valid file name of
// at most NAME_MAX bytes that is not of the shortened form.
func Usable(name string) bool {
	return ValidName(name) && len(name) <= NameMax && !hashLike(name)
}

// Shortened is the name of a key component that cannot be shown as it is:
// the component cut to fit NAME_MAX at a UTF-8 boundary, "~", the first 16
// hex digits of the SHA-256 of the whole component, and suffix (".npy" for
// files, "" for directories).
func Shortened(component, suffix string) string {
	sum := sha256.Sum256([]byte(component))
	t := component
	if n := NameMax - 1 - hashDigits - len(suffix); len(t) > n {
		for n > 0 && !utf8.RuneStart(t[n]) {
			n--
		}
		t = t[:n]
	}
	return t + "~" + hex.EncodeToString(sum[:])[:hashDigits] + suffix
}

// DirName is the name of the directory for prefix component d (a
// ValidName).
func DirName(d string) string {
	if Usable(d) {
		return d
	}
	return Shortened(d, "")
}

// DirNames returns the names the directory of prefix component d (a
// ValidName) can be shown under: for an archive's (WithArchives), its stem
// first (its usual name), then DirName(d) (what it keeps when the stem
// clashes with a sibling); for any other, DirName(d). The tree finds the
// nodes of a prefix with them (fs.FS.heldDirs), checking each node's
// prefix.
func (n Rule) DirNames(d string) []string {
	if stem, ok := n.archiveStem(d); ok {
		return []string{DirName(stem), DirName(d)}
	}
	return []string{DirName(d)}
}

// ValidName reports whether a key component can be a file name (the tree
// shows no other; walks descend into no other).
func ValidName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}

// FeaturePaths returns the paths, relative to a layer directory, that the
// feature file of image object key can have under the naming rule (package
// doc), the most specific first: the long name (the key with .npy
// appended), the short name (its extension replaced by .npy) and the
// shortened name, each where usable. Which one it has depends on the other
// keys; directories are named by their own name alone. A key with an
// empty, "." or ".." component has none: it is not shown.
func FeaturePaths(key string) []string {
	i := strings.LastIndexByte(key, '/')
	dir, base := "", key
	if i >= 0 {
		for c := range strings.SplitSeq(key[:i], "/") {
			if !ValidName(c) {
				return nil
			}
			dir += DirName(c) + "/"
		}
		base = key[i+1:]
	}
	if !ValidName(base) {
		return nil
	}
	var out []string
	if long := base + NPYExt; Usable(long) {
		out = append(out, dir+long)
	}
	if j := strings.LastIndexByte(base, '.'); j > 0 && Usable(base[:j]+NPYExt) {
		out = append(out, dir+base[:j]+NPYExt)
	}
	return append(out, dir+Shortened(base, NPYExt))
}

// StoreName returns the feature path of image object key under a layer
// directory of the feature store: its short name (the extension replaced
// by .npy), unless another image object of the same stem exists
// (siblings: keys that start with the key's stem and a dot; other keys are
// ignored) or the extension is in mixed case, where it is the long name
// (.npy appended to the whole key). A key that is not an image gets the
// long name.
//
// It decides from the stem's siblings alone, so it is the tree's rule
// (Resolver) only where that rule needs nothing else: unlike the tree it
// counts mixed-case siblings as clashes (a.jpg beside a.Png is a.jpg.npy
// here, a.npy in the tree), gives an empty stem its short name (.jpg is
// .npy), and ignores image keys equal to the stem, directories called
// S.npy and NAME_MAX (object keys are not file names). Store keys written
// under it must not change, so it keeps these differences.
func (n Rule) StoreName(key string, siblings []string) string {
	dir, base := "", key
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		dir, base = key[:i+1], key[i+1:]
	}
	stem, ext, ok := n.Parts(base)
	if !ok || !PlainCase(ext) {
		return key + NPYExt
	}
	for _, k := range siblings {
		if k == key || !strings.HasPrefix(k, dir) || strings.Contains(k[len(dir):], "/") {
			continue
		}
		if st, ok := n.Split(k[len(dir):]); ok && st == stem {
			return key + NPYExt
		}
	}
	return dir + stem + NPYExt
}
