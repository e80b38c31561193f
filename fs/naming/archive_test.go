package naming

import (
	"slices"
	"testing"

	"github.com/featurefs/featurefs/fs/bucket"
)

// An archive's prefix NAME.tar/ is the directory NAME, unless a prefix
// NAME/ or another archive NAME.zip/ is beside it; a lookup by name finds
// what a listing names, in every page size.
func TestArchivesAreDirectoriesWithoutTheirExtension(t *testing.T) {
	n := New(exts).WithArchives([]string{"tar", "zip"})
	keys := []string{
		"cat.tar/a.jpg", "dog.zip/b.jpg",
		"clash.tar/c.jpg", "clash/d.jpg",
		"two.tar/e.jpg", "two.zip/f.jpg",
		"cat.tar.gz", "cat.tarx/g.jpg", "catalog/h.jpg", ".tar/i.jpg",
	}
	want := map[string]string{
		"cat.tar/": "cat", "dog.zip/": "dog",
		"clash.tar/": "clash.tar", "clash/": "clash",
		"two.tar/": "two.tar", "two.zip/": "two.zip",
		"cat.tarx/": "cat.tarx", "catalog/": "catalog", ".tar/": ".tar",
	}
	for _, size := range []int{1, 2, 3, 100} {
		got := list(t, n, keys, size)
		if len(got) != len(want) {
			t.Errorf("page size %d: %d entries %v, want %v", size, len(got), got, want)
		}
		for k, name := range want {
			if got[k] != name {
				t.Errorf("page size %d: %s is %q, want %q", size, k, got[k], name)
			}
		}
	}
	// Without archives, the prefix keeps its name.
	if got := list(t, New(exts), []string{"cat.tar/a.jpg"}, 10); got["cat.tar/"] != "cat.tar" {
		t.Errorf("without archives: %v", got)
	}
	// A lookup by name probes the archives and resolves as the listing.
	dirs := map[string]bool{"cat.tar/": true, "clash.tar/": true, "clash/": true}
	for name, sub := range map[string]string{"cat": "cat.tar/", "clash": "clash/", "clash.tar": "clash.tar/"} {
		p, ok := n.Probe("", name)
		if !ok {
			t.Fatalf("probe %q: not ok", name)
		}
		var found []string
		for _, d := range p.Dirs {
			if dirs[d] {
				found = append(found, d)
			}
		}
		var archives []string
		for _, d := range found {
			if archivePrefix(d, nil) {
				archives = append(archives, d)
			}
		}
		e, ok := n.Resolve("", name, nil, found, archives, nil)
		if !ok || !e.Dir || e.Sub != sub {
			t.Errorf("lookup %q = %+v %v, want the directory of %s", name, e, ok, sub)
		}
	}
}

// TestRealDirectoryKeepsItsArchiveName: a real prefix named like an
// archive ("real.tar/", not in bucket.Page.Archives) is a directory, never
// an archive: it keeps its name whether archives are on or off, in a
// listing of every page size and in a lookup by name, and it does not
// clash with an archive of its stem. At 1942f8f a listing showed it as
// "real" with archives on and as "real.tar" with them off, so a class name
// depended on a flag.
func TestRealDirectoryKeepsItsArchiveName(t *testing.T) {
	on := New(exts).WithArchives([]string{"tar", "zip"})
	keys := []string{"real.tar/a.jpg", "Real.ZIP/b.jpg", "both.tar/c.jpg", "both.zip/d.jpg"}
	real := map[string]bool{"real.tar/": true, "Real.ZIP/": true, "both.tar/": true}
	want := map[string]string{"real.tar/": "real.tar", "Real.ZIP/": "Real.ZIP", "both.tar/": "both.tar", "both.zip/": "both"}
	for _, n := range []Rule{on, New(exts)} {
		for _, size := range []int{1, 2, 100} {
			got := listWith(t, n, keys, size, real)
			for k, name := range want {
				if len(n.archives) == 0 && k == "both.zip/" {
					name = "both.zip" // without archives every prefix keeps its name
				}
				if got[k] != name {
					t.Errorf("archives %v, page size %d: %s is %q, want %q", n.archives, size, k, got[k], name)
				}
			}
		}
	}
	// A lookup by name: the probe's listings say which prefixes are
	// archives (both.zip/), the others are real.
	for name, sub := range map[string]string{"real.tar": "real.tar/", "Real.ZIP": "Real.ZIP/", "both.tar": "both.tar/", "both": "both.zip/"} {
		p, _ := on.Probe("", name)
		var found, archives []string
		for _, d := range p.Dirs {
			if _, ok := want[d]; ok {
				found = append(found, d)
				if !real[d] {
					archives = append(archives, d)
				}
			}
		}
		e, ok := on.Resolve("", name, nil, found, archives, nil)
		if !ok || !e.Dir || e.Sub != sub {
			t.Errorf("lookup %q = %+v %v, want the directory of %s", name, e, ok, sub)
		}
	}
	for _, name := range []string{"real", "Real"} {
		p, _ := on.Probe("", name)
		var found []string
		for _, d := range p.Dirs {
			if _, ok := want[d]; ok {
				found = append(found, d)
			}
		}
		if e, ok := on.Resolve("", name, nil, found, nil, nil); ok {
			t.Errorf("lookup %q = %+v: a real directory real.tar/ is not called real", name, e)
		}
	}
}

// A plain object (an archive's sidecar) is shown as it is, beside its
// image's feature; one called like a feature is not shown.
func TestPlainObjectsKeepTheirNames(t *testing.T) {
	n := New(exts).WithArchives([]string{"tar"})
	r := NewResolver(n, "s.tar/", nil)
	es := r.Add(bucket.Page{Objects: []bucket.Object{
		{Key: "s.tar/a.cls", Plain: true}, {Key: "s.tar/a.jpg"}, {Key: "s.tar/a.npy", Plain: true}, {Key: "s.tar/b.txt"},
	}}, true)
	got := map[string]bool{}
	for _, e := range es {
		got[e.Name] = e.Obj.Plain
	}
	if len(got) != 2 || !got["a.cls"] || got["a.npy"] {
		t.Errorf("entries %v, want a.cls (plain) and a.npy (the feature)", got)
	}
	if p, _ := n.Probe("plain/", "a.cls"); len(p.Keys) != 0 {
		t.Errorf("a lookup outside archives Stats %q: plain files are only in archives", p.Keys)
	}
	p, _ := n.Probe("s.tar/", "a.cls")
	e, ok := n.Resolve("s.tar/", "a.cls", []bucket.Object{{Key: p.Keys[len(p.Keys)-1], Plain: true}}, nil, nil, nil)
	if !ok || e.Name != "a.cls" || !e.Obj.Plain {
		t.Errorf("lookup of a.cls = %+v %v", e, ok)
	}
}

// TestDirNamesOfAnArchive: the names an archive's directory can be shown
// under are its stem and its whole name (on a clash); any other prefix
// component has one.
func TestDirNamesOfAnArchive(t *testing.T) {
	n := New(exts).WithArchives([]string{"tar", "zip"})
	for d, want := range map[string][]string{
		"good.tar":  {"good", "good.tar"},
		"Dog.ZIP":   {"Dog", "Dog.ZIP"},
		"x.npy.tar": {"x.npy.tar"},
		"plain":     {"plain"},
		"a.tarx":    {"a.tarx"},
	} {
		if got := n.DirNames(d); !slices.Equal(got, want) {
			t.Errorf("DirNames(%q) = %q, want %q", d, got, want)
		}
	}
}
