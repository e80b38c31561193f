package views

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/naming"
)

// The fake tree is a Namespace: its listings, and lookups in them.

func (tr tree) Lookup(ctx context.Context, prefix, name string) (naming.Entry, error) {
	for _, e := range tr[prefix] {
		if e.Name == name {
			return e, nil
		}
	}
	return naming.Entry{}, fmt.Errorf("%s%s: %w", prefix, name, bucket.ErrNotFound)
}

func (tr tree) Each(ctx context.Context, prefix string, fn func(naming.Entry)) error {
	es, err := tr.list(ctx, prefix)
	for _, e := range es {
		fn(e)
	}
	return err
}

func names(es []Entry) []string {
	var out []string
	for _, e := range es {
		n := e.Name
		if e.Dir {
			n += "/"
		}
		out = append(out, n)
	}
	return out
}

// TestArrayDirsWithoutAKernel: arrays/<model>/ lists its layer views and
// each one's three arrays; a layer view's directory lists the bucket's
// directories and their arrays, where a bucket directory keeps the name
// X.npy and the array of X moves (naming.Generated); every name looks up
// to what it lists, an array's size needs no feature, a changed listing
// is a new inode number, and a name that is not there is ErrNotFound.
func TestArrayDirsWithoutAKernel(t *testing.T) {
	ctx := context.Background()
	tr := tree{"": nil}
	for _, p := range []string{"train/cat/a.npy", "train/cat/b.npy", "train/dog/c.npy", "train/cat.npy/d.npy"} {
		tr.add(p)
	}
	v := &Layer{Model: "m", Dir: "layer1", Name: "layer1"}
	v.cur.Store(testView())
	a := &Arrays{NS: tr, Snaps: NewSnapshots(0, 1<<20, nil), Env: &ArrayEnv{Source: &source{v: testView()}, Fetch: 2}, MaxRows: 100}
	g := NewArrayGroup(a, "m", map[string]*Layer{"layer1": v}, nil)

	es, err := g.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(es), []string{"layer1/", "layer1.labels.npy", "layer1.npy", "layer1.rows.jsonl"}; !slices.Equal(got, want) {
		t.Fatalf("arrays/m lists %v, want %v", got, want)
	}
	n, err := g.Lookup(ctx, "layer1")
	if err != nil || n.Dir == nil || n.Ino != es[0].Ino {
		t.Fatalf("lookup layer1: %+v %v (listed with inode %d)", n, err, es[0].Ino)
	}
	if f, err := g.Lookup(ctx, "layer1.npy"); err != nil || f.File == nil {
		t.Fatalf("lookup layer1.npy: %+v %v", f, err)
	} else if ds, _ := Scan(ctx, tr.list, "", 0); len(ds.Rows) != 4 || f.File.Size() != NewArray(a.Env, testView(), ds).Size() {
		t.Errorf("layer1.npy is %d bytes; the root's %d rows make %d", f.File.Size(), len(ds.Rows), NewArray(a.Env, testView(), ds).Size())
	}

	root, err := n.Dir.Lookup(ctx, "train")
	if err != nil || root.Dir == nil {
		t.Fatalf("lookup train: %+v %v", root, err)
	}
	es, err = root.Dir.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	moved := naming.Generated("cat.npy").Name(true)
	want := []string{"cat.labels.npy", "cat.npy/", "cat.npy.labels.npy", "cat.npy.npy", "cat.npy.rows.jsonl", "cat.rows.jsonl", "cat/", moved,
		"dog.labels.npy", "dog.npy", "dog.rows.jsonl", "dog/"}
	slices.SortFunc(want, func(x, y string) int { return strings.Compare(strings.TrimSuffix(x, "/"), strings.TrimSuffix(y, "/")) })
	if got := names(es); !slices.Equal(got, want) {
		t.Fatalf("train/ lists %v\nwant %v", got, want)
	}
	for _, e := range es {
		n, err := root.Dir.Lookup(ctx, e.Name)
		if err != nil {
			t.Errorf("lookup %s, listed: %v", e.Name, err)
			continue
		}
		if (n.Dir != nil) != e.Dir || (e.Dir && n.Ino != e.Ino) {
			t.Errorf("%s: listed dir %v inode %d, looked up %+v", e.Name, e.Dir, e.Ino, n)
		}
	}
	cat, err := root.Dir.Lookup(ctx, moved)
	if err != nil || cat.File == nil {
		t.Fatalf("lookup %s: %+v %v", moved, cat, err)
	}
	if ds := cat.File.(*Array).ds; ds.Prefix != "train/cat/" {
		t.Errorf("%s is the array of %q, want train/cat/", moved, ds.Prefix)
	}
	train, err := n.Dir.Lookup(ctx, "train.npy")
	if err != nil || train.File == nil {
		t.Fatalf("lookup train.npy: %+v %v", train, err)
	}
	if ds := train.File.(*Array).ds; len(ds.Rows) != 4 || !slices.Equal(ds.Classes, []string{"cat", "cat.npy", "dog"}) {
		t.Errorf("train.npy: %d rows of classes %v", len(ds.Rows), ds.Classes)
	}
	if d, err := root.Dir.Lookup(ctx, "cat.npy"); err != nil || d.Dir == nil {
		t.Errorf("cat.npy (the bucket's directory) looked up as %+v %v", d, err)
	}
	for _, name := range []string{"bird.npy", "bird", "a.npy~0123456789abcdef"} {
		if _, err := root.Dir.Lookup(ctx, name); !errors.Is(err, bucket.ErrNotFound) {
			t.Errorf("lookup %s: %v, want ErrNotFound", name, err)
		}
	}

	tr["train/cat/"][0].Obj.ETag = "e2" // a.jpg replaced
	time.Sleep(time.Millisecond)        // past the snapshots' TTL of 0
	train2, err := n.Dir.Lookup(ctx, "train.npy")
	if err != nil || train2.Ino == train.Ino {
		t.Errorf("a replaced object kept the array's inode number (%d): %v", train.Ino, err)
	}
}
