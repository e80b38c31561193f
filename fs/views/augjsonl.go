package views

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/featurefs/featurefs/extractor/augment"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/naming"
)

// augment.jsonl: in every directory of a view tree (LAYER-aug/k/...), one
// line per view file in it, by name, with that view's parameters:
//
//	{"file":"img0.npy","top":18,"left":12,"height":283,"width":339,"flip":false,"size":224,"seed":0,"view":0}
//
// the same JSON as the file's extended attribute, with its name. So that
// stat computes nothing (the file's size is known from the listing alone),
// every line is padded with spaces before its newline to a width that
// depends only on the name: augLineFixed bytes beside the name's JSON
// string. A JSON-lines reader ignores the spaces. Reading the file fetches
// the header of each image whose line it reads (AugJSONLFetches at once;
// the parameters are then remembered: features.Pipeline.ViewParams); an
// image that is not one gets {"file":...,"error":"not an image"}. A file
// is made from one listing (AugJSONL holds it): its size and its bytes
// come from the same one, and its Version (the mount's inode number)
// changes with it, so a changed directory is a new file once the kernel
// looks the name up again (after --metadata-ttl). A name that is not valid
// UTF-8, which a JSON string cannot hold, is also given as its bytes in
// base64 ("file_b64": naming.RawName). The file is listed after the
// bucket's entries; where the bucket shows an entry called augment.jsonl
// (a prefix, an archive, an archive's sidecar), that entry keeps the name
// and the file is augment.jsonl's moved name (naming.Generated).

// AugmentJSONL is a view directory's parameters file.
const AugmentJSONL naming.Generated = "augment.jsonl"

// augLineFixed is a line's width beside its name's JSON string: the keys,
// punctuation and the widest values (10 digits for the box and size, 20
// for the seed, 10 for the view, "false"), and the newline.
var augLineFixed = len(`{"file":,"top":,"left":,"height":,"width":,"flip":false,"size":,"seed":,"view":}`) + 4*10 + 10 + 20 + 10 + 1

// AugJSONLFetches bounds the image headers one read of an augment.jsonl
// fetches at once.
const AugJSONLFetches = 8

// augRawFixed is the width of the "file_b64" field beside its value.
var augRawFixed = len(`,"file_b64":""`)

// augLineWidth is the width of the line of the file called name.
func augLineWidth(name string) int {
	b, _ := json.Marshal(name)
	w := len(b) + augLineFixed
	if raw := naming.RawName(name); raw != "" {
		w += augRawFixed + len(raw)
	}
	return w
}

// augLine renders the line of the view file called name: params, or the
// error, padded to augLineWidth.
func augLine(name string, params augment.Params, bad bool) []byte {
	var b []byte
	raw := naming.RawName(name)
	if bad {
		b, _ = json.Marshal(struct {
			File    string `json:"file"`
			FileB64 string `json:"file_b64,omitempty"`
			Error   string `json:"error"`
		}{name, raw, "not an image"})
	} else {
		b, _ = json.Marshal(struct {
			File    string `json:"file"`
			FileB64 string `json:"file_b64,omitempty"`
			augment.Params
		}{name, raw, params})
	}
	w := augLineWidth(name)
	if len(b) > w-1 { // cannot happen: the fixed part holds the widest values
		b = b[:w-1]
	}
	line := make([]byte, w)
	copy(line, b)
	for i := len(b); i < w-1; i++ {
		line[i] = ' '
	}
	line[w-1] = '\n'
	return line
}

// AugFiles returns, of one directory's whole listing es, the view files
// (every feature file: not subdirectories, not archive sidecars) in
// listing order, and the bucket's entry called augment.jsonl when the
// directory shows one (nil when not: the generated file then has its
// usual name).
func AugFiles(es []naming.Entry) (files []naming.Entry, taken *naming.Entry) {
	for _, e := range es {
		if e.Name == string(AugmentJSONL) {
			taken = &e
		}
		if !e.Dir && !e.Obj.Plain {
			files = append(files, e)
		}
	}
	return files, taken
}

// AugJSONLIno is the inode number of augment.jsonl in directory prefix of
// view v at file's version (nil: the number readdir reports, without the
// listing): a changed directory is a new file.
func AugJSONLIno(v *Layer, prefix string, file File) uint64 {
	var ver uint64
	if file != nil {
		ver = file.Version()
	}
	return Ino('j', "features", v.Model, v.Dir, prefix, strconv.FormatUint(ver, 16))
}

// AugJSONLLookup answers a lookup of name in directory prefix of view v,
// where name is augment.jsonl's usual or moved name (AugmentJSONL.Is),
// from one listing: taken, the bucket's entry, when it has the usual
// name; else the augment.jsonl file under the name the listing gives it;
// else ErrNotFound.
func AugJSONLLookup(ctx context.Context, ns Namespace, src ParamSource, v *Layer, prefix, name string) (n Node, taken *naming.Entry, err error) {
	es, err := ListAll(ns)(ctx, prefix)
	if err != nil {
		return Node{}, nil, err
	}
	files, taken := AugFiles(es)
	switch {
	case taken != nil && name == string(AugmentJSONL):
		return Node{}, taken, nil
	case name != AugmentJSONL.Name(taken != nil):
		return Node{}, nil, bucket.ErrNotFound
	}
	file := NewAugJSONL(src, v.View(), prefix, files)
	return Node{Ino: AugJSONLIno(v, prefix, file), File: file}, nil, nil
}

// ParamSource draws an image's view parameters: features.Pipeline.
type ParamSource interface {
	ViewParams(ctx context.Context, v *features.View, obj bucket.Object) (augment.Params, error)
}

// AugJSONL is one directory's augment.jsonl, made from one listing.
type AugJSONL struct {
	src     ParamSource
	v       *features.View
	prefix  string // for errors
	files   []naming.Entry
	ends    []int64 // ends[i]: the offset after line i
	mod     time.Time
	version uint64
}

// NewAugJSONL returns the augment.jsonl of the view files files of
// directory prefix at view v.
func NewAugJSONL(src ParamSource, v *features.View, prefix string, files []naming.Entry) *AugJSONL {
	j := &AugJSONL{src: src, v: v, prefix: prefix, files: files, ends: make([]int64, len(files))}
	h := sha256.New()
	var pos int64
	for i, e := range files {
		pos += int64(augLineWidth(e.Name))
		j.ends[i] = pos
		if e.Obj.ModTime.After(j.mod) {
			j.mod = e.Obj.ModTime
		}
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00", e.Name, e.Obj.Key, e.Obj.ETag)
	}
	j.version = binary.LittleEndian.Uint64(h.Sum(nil))
	return j
}

// Size is the file's size, from the listing alone.
func (j *AugJSONL) Size() int64 {
	if len(j.ends) == 0 {
		return 0
	}
	return j.ends[len(j.ends)-1]
}

// ModTime is the newest view file's object's (zero for none).
func (j *AugJSONL) ModTime() time.Time { return j.mod }

// Version identifies the listing: the names, keys and ETags.
func (j *AugJSONL) Version() uint64 { return j.version }

// ReadAt renders the lines [off, off+len(p)) covers, their images'
// parameters drawn AugJSONLFetches at once.
func (j *AugJSONL) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off >= j.Size() || off < 0 {
		return 0, nil
	}
	end := off + int64(len(p))
	first := sort.Search(len(j.ends), func(i int) bool { return j.ends[i] > off })
	last := first
	for last < len(j.ends) && (last == first || j.ends[last-1] < end) {
		last++
	}
	lines := make([][]byte, last-first)
	errs := make([]error, len(lines))
	sem := make(chan struct{}, AugJSONLFetches)
	var wg sync.WaitGroup
	for i := range lines {
		e := j.files[first+i]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			params, err := j.src.ViewParams(ctx, j.v, e.Obj)
			if err != nil && !features.BadObject(err) {
				errs[i] = fmt.Errorf("%s%s: %w", j.prefix, e.Name, err)
				return
			}
			lines[i] = augLine(e.Name, params, err != nil)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	start := int64(0)
	if first > 0 {
		start = j.ends[first-1]
	}
	n := 0
	for _, l := range lines {
		skip := max(off+int64(n)-start, 0)
		n += copy(p[n:], l[min(skip, int64(len(l))):])
		start += int64(len(l))
	}
	return n, nil
}
