package archive

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/bucket"
)

// ErrBadArchive is matched (errors.Is) by the errors of an archive that
// cannot be indexed and of a member that cannot be read.
var ErrBadArchive = errors.New("bad archive")

// Bounds on what one archive may hold.
const (
	// MaxMembers is the most members an archive may have (an index of more
	// is refused as absurd).
	MaxMembers = 1 << 20
	// MaxPathBytes is the longest member path kept; longer ones are left out.
	MaxPathBytes = 1024
	// MaxDirectoryBytes bounds a zip central directory.
	MaxDirectoryBytes = 64 << 20
	// MaxRatio is the largest uncompressed/compressed size ratio a deflated
	// member of over 1 MiB may declare (above it, a zip bomb: the member is
	// left out).
	// Images barely compress; text sidecars compress some 10 times.
	MaxRatio = 200
)

// member is one archive member the index keeps (an image or a sidecar).
type member struct {
	path   string // cleaned, relative to the archive
	off    int64  // tar: the data's offset; zip: the local header's
	size   int64  // stored (compressed) size
	usize  int64  // uncompressed size
	crc    uint32 // zip only
	method uint16 // zip: 0 stored, 8 deflate
	zip    bool
	plain  bool
	// repeated: the archive has other members at this path before it
	// (the last one wins); its ETag names its offset too, so that a
	// feature computed from an earlier copy (a stream hands over each
	// copy as it comes) is never taken for it.
	repeated bool
}

// index is what is known of one archive version: its members, sorted by
// path, or why it cannot be read.
type index struct {
	key     string
	etag    string
	size    int64
	modTime time.Time
	members []member // sorted by path
	err     error    // the archive cannot be read: every listing of it fails
	skipped int      // members left out as bad
	gets    int      // requests the index took
}

// cost is the index's weight in the LRU, in bytes (about).
func (x *index) cost() int {
	n := 256 + len(x.key)
	for _, m := range x.members {
		n += 72 + len(m.path)
	}
	return n
}

// find returns the member at path.
func (x *index) find(path string) (*member, bool) {
	i := sort.Search(len(x.members), func(i int) bool { return x.members[i].path >= path })
	if i < len(x.members) && x.members[i].path == path {
		return &x.members[i], true
	}
	return nil, false
}

// object is member m as a bucket object. Its ETag is the archive's and a
// digest of its path, and its offset when the path is repeated.
func (x *index) object(m *member) bucket.Object {
	sum := sha256.Sum256([]byte(m.path))
	etag := x.etag + "-m" + hex.EncodeToString(sum[:6])
	if m.repeated {
		etag += "-o" + strconv.FormatInt(m.off, 10)
	}
	return bucket.Object{
		Key:     x.key + "/" + m.path,
		Size:    m.usize,
		ETag:    etag,
		ModTime: x.modTime,
		Plain:   m.plain,
	}
}

// list returns up to n entries directly under dir ("" or "a/b/", relative
// to the archive) after token (a full key, or ""), as a bucket page with
// full keys, in S3's order.
func (x *index) list(dir, token string, n int) bucket.Page {
	var p bucket.Page
	base := x.key + "/"
	after := ""
	if t, ok := strings.CutPrefix(token, base); ok {
		after = t
	}
	i := sort.Search(len(x.members), func(i int) bool { return x.members[i].path >= dir })
	if after != "" {
		i = max(i, sort.Search(len(x.members), func(i int) bool { return x.members[i].path > after }))
	}
	for i < len(x.members) && strings.HasPrefix(x.members[i].path, dir) {
		if len(p.Prefixes)+len(p.Objects) >= n {
			p.Next = lastKey(p)
			return p
		}
		rest := x.members[i].path[len(dir):]
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			sub := dir + rest[:j+1]
			if sub > after { // a token inside sub: sub was listed
				p.Prefixes = append(p.Prefixes, base+sub)
			}
			// Skip sub's members: the first path past "sub/..." is >= sub
			// with '/' replaced by '0'.
			end := sub[:len(sub)-1] + "0"
			i = sort.Search(len(x.members), func(k int) bool { return x.members[k].path >= end })
			continue
		}
		p.Objects = append(p.Objects, x.object(&x.members[i]))
		i++
	}
	return p
}

// lastKey is the last key of a page (its continuation token).
func lastKey(p bucket.Page) string {
	last := ""
	if n := len(p.Prefixes); n > 0 {
		last = p.Prefixes[n-1]
	}
	if n := len(p.Objects); n > 0 && p.Objects[n-1].Key > last {
		last = p.Objects[n-1].Key
	}
	return last
}

// keys returns up to n member keys that start with keyPrefix (relative to
// the archive) and have no '/' after it.
func (x *index) keys(keyPrefix string, n int) []string {
	var out []string
	i := sort.Search(len(x.members), func(i int) bool { return x.members[i].path >= keyPrefix })
	for ; i < len(x.members) && len(out) < n && strings.HasPrefix(x.members[i].path, keyPrefix); i++ {
		if !strings.Contains(x.members[i].path[len(keyPrefix):], "/") {
			out = append(out, x.key+"/"+x.members[i].path)
		}
	}
	return out
}

// cleanPath returns a member name as a path relative to the archive:
// leading "./" dropped, "." elements and repeated slashes dropped. It
// refuses (ok false, with why) an absolute path, a ".." element, a NUL and
// a path over MaxPathBytes.
func cleanPath(name string) (path, why string) {
	switch {
	case strings.HasPrefix(name, "/"):
		return "", "absolute path"
	case strings.ContainsRune(name, 0):
		return "", "NUL in the name"
	case len(name) > MaxPathBytes:
		return "", fmt.Sprintf("path over %d bytes", MaxPathBytes)
	}
	if clean(name) {
		return name, "" // no copy: the common case
	}
	var elems []string
	for e := range strings.SplitSeq(name, "/") {
		switch e {
		case "", ".":
			continue
		case "..":
			return "", "'..' in the path"
		}
		elems = append(elems, e)
	}
	if len(elems) == 0 {
		return "", "empty path"
	}
	return strings.Join(elems, "/"), ""
}

// clean reports whether name (not absolute, no NUL) is already as
// cleanPath returns it: no empty, "." or ".." element.
func clean(name string) bool {
	if name == "" || name[len(name)-1] == '/' {
		return false
	}
	for e := range strings.SplitSeq(name, "/") {
		if e == "" || e == "." || e == ".." {
			return false
		}
	}
	return true
}

// sampleKey is a base name up to its first dot (WebDataset's sample key).
func sampleKey(base string) string {
	if i := strings.IndexByte(base, '.'); i >= 0 {
		return base[:i]
	}
	return base
}

// finish sorts the members, drops duplicates (the last one of a path
// wins, as tar extraction would), file members whose path is also a
// directory, and members that are neither images nor sidecars, and marks
// sidecars plain. It works in place on the sorted members, with binary
// searches instead of maps of paths (the transient memory of a build is
// the members themselves: issue 36 item 8).
func (x *index) finish(imageExts []string) {
	// Last one wins: stable sort keeps the order of equal paths.
	slices.SortStableFunc(x.members, func(a, b member) int { return strings.Compare(a.path, b.path) })
	out := x.members[:0]
	for i, m := range x.members {
		if i+1 < len(x.members) && x.members[i+1].path == m.path {
			continue
		}
		m.repeated = m.repeated || (i > 0 && x.members[i-1].path == m.path)
		out = append(out, m)
	}
	x.members = out
	// What to keep, decided on the sorted members before any moves.
	const (
		drop = iota
		keep
		plain
	)
	fate := make([]uint8, len(x.members))
	for i := range x.members {
		// A file that is also a directory: the directory wins.
		if isDir(x.members, i) {
			continue
		}
		d, b := split(x.members[i].path)
		switch {
		case isImage(b, imageExts):
			fate[i] = keep
		case !strings.HasSuffix(strings.ToLower(b), ".npy") && hasImage(x.members, d, sampleKey(b), imageExts):
			fate[i] = plain
		}
	}
	out = x.members[:0]
	for i, m := range x.members {
		if fate[i] == drop {
			continue
		}
		m.plain = fate[i] == plain
		out = append(out, m)
	}
	clear(x.members[len(out):]) // the paths of the members left out
	x.members = slices.Clip(out)
}

func isImage(base string, imageExts []string) bool {
	_, _, ok := spec.SplitImage(base, imageExts)
	return ok
}

// isDir reports whether some member of sorted all lies under all[i].path
// + "/" (they sort after it, maybe after paths like "path-x" and
// "path.y": the binary search finds the first at or after "path/").
func isDir(all []member, i int) bool {
	p := all[i].path
	// The first path at or after p+"/", compared without building it.
	after := func(q string) bool {
		if len(q) > len(p) && q[:len(p)] == p {
			return q[len(p)] >= '/'
		}
		return q >= p
	}
	j := i + 1 + sort.Search(len(all)-i-1, func(k int) bool { return after(all[i+1+k].path) })
	q := ""
	if j < len(all) {
		q = all[j].path
	}
	return len(q) > len(p) && q[:len(p)] == p && q[len(p)] == '/'
}

// hasImage reports whether sorted members all hold an image in directory
// dir whose sample key is key: a member dir+key+".ext..." with no '/'
// after it, whose base is an image's.
func hasImage(all []member, dir, key string, imageExts []string) bool {
	prefix := dir + key + "."
	j, _ := slices.BinarySearchFunc(all, prefix, func(m member, t string) int { return strings.Compare(m.path, t) })
	for ; j < len(all) && strings.HasPrefix(all[j].path, prefix); j++ {
		base := all[j].path[len(dir):]
		if strings.IndexByte(base, '/') < 0 && isImage(base, imageExts) {
			return true
		}
	}
	return false
}

// split cuts a path into its directory ("" or ending in '/') and base.
func split(path string) (dir, base string) {
	i := strings.LastIndexByte(path, '/')
	return path[:i+1], path[i+1:]
}
