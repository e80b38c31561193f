package fs

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/featurefs/featurefs/extractor/augment"
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
// the header of each image whose line it reads (augJSONLFetches at once;
// the parameters are then remembered: features.Pipeline.ViewParams); an
// image that is not one gets {"file":...,"error":"not an image"}. The
// file's inode number carries a digest of the listing it was made from, so
// a changed directory is a new file once the kernel looks the name up
// again (after --metadata-ttl). A name that is not valid UTF-8, which a
// JSON string cannot hold, is also given as its bytes in base64
// ("file_b64": naming.RawName). The file is listed after the bucket's
// entries; where the bucket shows an entry called augment.jsonl (a
// prefix, an archive, an archive's sidecar), that entry keeps the name
// and the file is augment.jsonl's moved name (naming.Generated).

// augmentJSONL is a view directory's parameters file.
const augmentJSONL naming.Generated = "augment.jsonl"

// augLineFixed is a line's width beside its name's JSON string: the keys,
// punctuation and the widest values (10 digits for the box and size, 20
// for the seed, 10 for the view, "false"), and the newline.
var augLineFixed = len(`{"file":,"top":,"left":,"height":,"width":,"flip":false,"size":,"seed":,"view":}`) + 4*10 + 10 + 20 + 10 + 1

// augJSONLFetches bounds the image headers one read of an augment.jsonl
// fetches at once.
const augJSONLFetches = 8

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

// augJSONL is a view directory's augment.jsonl.
type augJSONL struct {
	gofs.Inode
	readOnly
	noOpen
	dir *prefixDir // the view directory
}

var _ = (gofs.NodeGetattrer)((*augJSONL)(nil))
var _ = (gofs.NodeReader)((*augJSONL)(nil))

// viewFiles returns the view files of d's directory, in listing order:
// every feature file (not subdirectories, not archive sidecars); and the
// bucket's entry called augment.jsonl when the directory shows one (nil
// when not: the generated file then has its usual name).
func viewFiles(ctx context.Context, d *prefixDir) (files []naming.Entry, taken *naming.Entry, err error) {
	r := d.fs.ns.OpenDir(ctx, d.prefix)
	defer r.Close()
	for !r.Done() {
		es, err := r.Next(ctx)
		if err != nil {
			return nil, nil, err
		}
		for _, e := range es {
			if e.Name == string(augmentJSONL) {
				taken = &e
			}
			if !e.Dir && !e.Obj.Plain {
				files = append(files, e)
			}
		}
	}
	return files, taken, nil
}

// augJSONLIno is the inode number of d's augment.jsonl made from files
// (nil: the number readdir reports, without the listing).
func augJSONLIno(d *prefixDir, files []naming.Entry) uint64 {
	h := sha256.New()
	for _, e := range files {
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00", e.Name, e.Obj.Key, e.Obj.ETag)
	}
	var sum [8]byte
	if files != nil {
		copy(sum[:], h.Sum(nil))
	}
	return ino('j', "features", d.view.model, d.view.dir, d.prefix, fmt.Sprint(binary.LittleEndian.Uint64(sum[:])))
}

// augJSONLLookup answers a lookup of name in view directory d, where name
// is augment.jsonl's usual or moved name (augmentJSONL.Is): the bucket's
// entry when it has the usual name, the augment.jsonl node under the name
// the directory's listing gives it, else ENOENT.
func augJSONLLookup(ctx context.Context, d *prefixDir, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	files, taken, err := viewFiles(ctx, d)
	if err != nil {
		return nil, d.fs.errno(err, d.prefix+name)
	}
	if taken != nil && name == string(augmentJSONL) {
		if taken.Dir {
			d.fs.revalidateDir(ctx, taken.Sub)
		}
		return d.child(ctx, *taken, out), 0
	}
	if name != augmentJSONL.Name(taken != nil) {
		return nil, syscall.ENOENT
	}
	id := gofs.StableAttr{Mode: syscall.S_IFREG, Ino: augJSONLIno(d, files)}
	fileAttr(&out.Attr, augJSONLSize(files), newest(files))
	if ch := d.GetChild(name); ch != nil && ch.StableAttr() == id {
		return ch, 0
	}
	return d.NewInode(ctx, &augJSONL{noOpen: noOpen{d.fs}, dir: d}, id), 0
}

// newest is the latest modification time of files' objects: the
// augment.jsonl's (zero time for none).
func newest(files []naming.Entry) time.Time {
	var t time.Time
	for _, e := range files {
		if e.Obj.ModTime.After(t) {
			t = e.Obj.ModTime
		}
	}
	return t
}

// augJSONLSize is the size of the augment.jsonl of files.
func augJSONLSize(files []naming.Entry) int64 {
	var n int64
	for _, e := range files {
		n += int64(augLineWidth(e.Name))
	}
	return n
}

// Getattr reports the file's size, from the directory's listing.
func (j *augJSONL) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	files, _, err := viewFiles(ctx, j.dir)
	if err != nil {
		return j.dir.fs.errno(err, j.dir.prefix+string(augmentJSONL))
	}
	fileAttr(&out.Attr, augJSONLSize(files), newest(files))
	return 0
}

// Read renders the lines that [off, off+len(dest)) covers.
func (j *augJSONL) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	d := j.dir
	files, _, err := viewFiles(ctx, d)
	if err != nil {
		return nil, d.fs.errno(err, d.prefix+string(augmentJSONL))
	}
	end := off + int64(len(dest))
	type span struct {
		e     naming.Entry
		start int64
	}
	var want []span
	var pos int64
	for _, e := range files {
		w := int64(augLineWidth(e.Name))
		if pos+w > off && pos < end {
			want = append(want, span{e, pos})
		}
		pos += w
		if pos >= end {
			break
		}
	}
	lines := make([][]byte, len(want))
	errs := make([]error, len(want))
	fv := d.view.view()
	sem := make(chan struct{}, augJSONLFetches)
	var wg sync.WaitGroup
	for i, s := range want {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			params, err := d.fs.p.ViewParams(ctx, fv, s.e.Obj)
			if err != nil && !features.BadObject(err) {
				errs[i] = fmt.Errorf("%s%s: %w", d.prefix, s.e.Name, err)
				return
			}
			lines[i] = augLine(s.e.Name, params, err != nil)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, d.fs.errno(err, d.prefix+string(augmentJSONL))
	}
	var b strings.Builder
	for _, l := range lines {
		b.Write(l)
	}
	var first int64
	if len(want) > 0 {
		first = want[0].start
	}
	return fuse.ReadResultData(sliceAt([]byte(b.String()), dest, off-first)), 0
}
