package bucket_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/featurefs/featurefs/fs/bucket"
)

// store is a writable backing store the conformance suite fills and then
// reads through a Bucket.
type store interface {
	// open returns a Bucket over the store, rooted at prefix ("" or "p/").
	open(t *testing.T, prefix string, opts bucket.S3Options) bucket.Bucket
	put(t *testing.T, key string, data []byte)
	del(t *testing.T, key string)
}

// listAll pages through one level of b under prefix and checks page sizes.
func listAll(t *testing.T, b bucket.Bucket, prefix string, pageSize int) (prefixes []string, objects []bucket.Object, pages int) {
	t.Helper()
	token := ""
	for {
		p, err := b.List(context.Background(), prefix, token)
		if err != nil {
			t.Fatalf("List(%q, %q): %v", prefix, token, err)
		}
		pages++
		if n := len(p.Prefixes) + len(p.Objects); pageSize > 0 && n > pageSize {
			t.Fatalf("List(%q) page %d has %d entries, page size %d", prefix, pages, n, pageSize)
		}
		prefixes = append(prefixes, p.Prefixes...)
		objects = append(objects, p.Objects...)
		if p.Next == "" {
			break
		}
		if p.Next == token {
			t.Fatalf("List(%q): token %q does not advance", prefix, token)
		}
		token = p.Next
		if pages > 10000 {
			t.Fatal("List does not terminate")
		}
	}
	return prefixes, objects, pages
}

func keys(objs []bucket.Object) []string {
	var ks []string
	for _, o := range objs {
		ks = append(ks, o.Key)
	}
	slices.Sort(ks)
	return ks
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// testConformance runs the behaviour every Bucket must share.
func testConformance(t *testing.T, s store) {
	ctx := context.Background()
	opts := bucket.DefaultS3Options()
	files := map[string][]byte{
		"a.jpg":                    []byte("alpha"),
		"z.txt":                    []byte("zulu!"),
		"b/c.jpg":                  []byte("charlie"),
		"b/d/e.jpg":                []byte("echo"),
		"sp ace/ünï cödé %41+.jpg": []byte("weird key"),
		"sub/x.jpg":                []byte("in sub"),
		"sub/deeper/y.png":         []byte("deeper"),
	}
	for k, v := range files {
		s.put(t, k, v)
	}
	b := s.open(t, "", opts)

	t.Run("AfterToken", func(t *testing.T) {
		// A page from AfterToken(key) starts right after key, existing or
		// not, objects and prefixes alike (S3's StartAfter).
		for _, c := range []struct {
			prefix, after string
			want          []string
		}{
			{"", "a", []string{"a.jpg", "b/", "sp ace/", "sub/", "z.txt"}},
			{"", "a.jpg", []string{"b/", "sp ace/", "sub/", "z.txt"}},
			{"", "b/", []string{"sp ace/", "sub/", "z.txt"}},
			{"", "su", []string{"sub/", "z.txt"}},
			{"b/", "b/c", []string{"b/c.jpg", "b/d/"}},
			{"b/", "b/c.jpg", []string{"b/d/"}},
		} {
			p, err := b.List(ctx, c.prefix, bucket.AfterToken(c.after))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			got = append(got, p.Prefixes...)
			for _, o := range p.Objects {
				got = append(got, o.Key)
			}
			slices.Sort(got)
			if !slices.Equal(got, c.want) || p.Next != "" {
				t.Errorf("List(%q, AfterToken(%q)) = %v (next %q), want %v", c.prefix, c.after, got, p.Next, c.want)
			}
		}
	})

	t.Run("GetRange", func(t *testing.T) {
		r, ok := b.(bucket.Ranger)
		if !ok {
			t.Fatal("not a bucket.Ranger")
		}
		st, err := b.Stat(ctx, "b/c.jpg")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			off, n int64
			want   string
		}{{0, 7, "charlie"}, {2, 3, "arl"}, {5, 100, "ie"}, {6, 1, "e"}} {
			data, obj, err := r.GetRange(ctx, "b/c.jpg", c.off, c.n)
			if err != nil || string(data) != c.want || obj.Size != 7 || obj.ETag != st.ETag {
				t.Errorf("GetRange(%d, %d) = %q, %+v, %v; want %q, size 7, ETag %s", c.off, c.n, data, obj, err, c.want, st.ETag)
			}
		}
		if _, _, err := r.GetRange(ctx, "nope.jpg", 0, 1); !errors.Is(err, bucket.ErrNotFound) {
			t.Errorf("GetRange of a missing key: %v, want ErrNotFound", err)
		}
	})

	t.Run("ListOneLevel", func(t *testing.T) {
		prefixes, objects, _ := listAll(t, b, "", 0)
		if got, want := sorted(prefixes), []string{"b/", "sp ace/", "sub/"}; !slices.Equal(got, want) {
			t.Errorf("root prefixes = %q, want %q", got, want)
		}
		if got, want := keys(objects), []string{"a.jpg", "z.txt"}; !slices.Equal(got, want) {
			t.Errorf("root objects = %q, want %q", got, want)
		}
		prefixes, objects, _ = listAll(t, b, "b/", 0)
		if got, want := sorted(prefixes), []string{"b/d/"}; !slices.Equal(got, want) {
			t.Errorf("b/ prefixes = %q, want %q", got, want)
		}
		if got, want := keys(objects), []string{"b/c.jpg"}; !slices.Equal(got, want) {
			t.Errorf("b/ objects = %q, want %q", got, want)
		}
		for _, o := range objects {
			st, err := b.Stat(ctx, o.Key)
			if err != nil {
				t.Fatalf("Stat(%q): %v", o.Key, err)
			}
			if st.Size != int64(len(files[o.Key])) || o.Size != st.Size || o.ETag != st.ETag || o.ETag == "" {
				t.Errorf("listed %+v, stat %+v, want size %d and equal non-empty ETags", o, st, len(files[o.Key]))
			}
		}
	})

	t.Run("ListMissingPrefix", func(t *testing.T) {
		p, err := b.List(ctx, "nope/", "")
		if err != nil && !errors.Is(err, bucket.ErrNotFound) {
			t.Fatalf("List(nope/): %v, want empty or ErrNotFound", err)
		}
		if len(p.Objects)+len(p.Prefixes) != 0 || p.Next != "" {
			t.Errorf("List(nope/) = %+v, want empty", p)
		}
		if _, err := b.List(ctx, "b", ""); err == nil {
			t.Error("List(\"b\") without trailing slash succeeded, want an error")
		}
	})

	t.Run("StatGet", func(t *testing.T) {
		for k, v := range files {
			data, obj, err := b.Get(ctx, k, 1<<20)
			if err != nil {
				t.Fatalf("Get(%q): %v", k, err)
			}
			if !bytes.Equal(data, v) {
				t.Errorf("Get(%q) = %q, want %q", k, data, v)
			}
			st, err := b.Stat(ctx, k)
			if err != nil {
				t.Fatalf("Stat(%q): %v", k, err)
			}
			if obj.Key != k || st.Key != k || obj.Size != int64(len(v)) || st.Size != obj.Size ||
				obj.ETag != st.ETag || strings.Contains(obj.ETag, `"`) || obj.ModTime.IsZero() {
				t.Errorf("Get(%q) object %+v, Stat %+v", k, obj, st)
			}
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		for _, k := range []string{"missing.jpg", "b/missing.jpg", "nope/x.jpg", ""} {
			if _, err := b.Stat(ctx, k); !errors.Is(err, bucket.ErrNotFound) {
				t.Errorf("Stat(%q) = %v, want ErrNotFound", k, err)
			}
			if _, _, err := b.Get(ctx, k, 100); !errors.Is(err, bucket.ErrNotFound) {
				t.Errorf("Get(%q) = %v, want ErrNotFound", k, err)
			} else if k != "" && !strings.Contains(err.Error(), k) {
				t.Errorf("Get(%q) error %q does not name the key", k, err)
			}
		}
	})

	t.Run("TooLarge", func(t *testing.T) {
		if _, _, err := b.Get(ctx, "b/c.jpg", 6); !errors.Is(err, bucket.ErrTooLarge) {
			t.Errorf("Get(b/c.jpg, 6) = %v, want ErrTooLarge", err)
		}
		if data, _, err := b.Get(ctx, "b/c.jpg", 7); err != nil || string(data) != "charlie" {
			t.Errorf("Get(b/c.jpg, 7) = %q, %v; want the content", data, err)
		}
		o := opts
		o.MaxObjectBytes = 4 // the limit of a Get with maxBytes <= 0
		small := s.open(t, "", o)
		if _, _, err := small.Get(ctx, "a.jpg", 0); !errors.Is(err, bucket.ErrTooLarge) {
			t.Errorf("Get(a.jpg, 0) with MaxObjectBytes 4 = %v, want ErrTooLarge", err)
		}
		if data, _, err := small.Get(ctx, "a.jpg", 5); err != nil || string(data) != "alpha" {
			t.Errorf("Get(a.jpg, 5) = %q, %v; want the content", data, err)
		}
	})

	t.Run("Overwrite", func(t *testing.T) {
		s.put(t, "ow.jpg", []byte("version one"))
		before, err := b.Stat(ctx, "ow.jpg")
		if err != nil {
			t.Fatal(err)
		}
		s.put(t, "ow.jpg", []byte("version two, longer"))
		data, after, err := b.Get(ctx, "ow.jpg", 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if string(data) != "version two, longer" || after.ETag == before.ETag {
			t.Errorf("after overwrite: %q etag %q (before %q); want new content and a new ETag", data, after.ETag, before.ETag)
		}
	})

	t.Run("Deleted", func(t *testing.T) {
		s.put(t, "gone.jpg", []byte("soon gone"))
		if _, err := b.Stat(ctx, "gone.jpg"); err != nil {
			t.Fatal(err)
		}
		s.del(t, "gone.jpg")
		if _, _, err := b.Get(ctx, "gone.jpg", 100); !errors.Is(err, bucket.ErrNotFound) {
			t.Errorf("Get(deleted) = %v, want ErrNotFound", err)
		}
		if _, err := b.Stat(ctx, "gone.jpg"); !errors.Is(err, bucket.ErrNotFound) {
			t.Errorf("Stat(deleted) = %v, want ErrNotFound", err)
		}
	})

	t.Run("Prefix", func(t *testing.T) {
		pb := s.open(t, "sub/", opts)
		if pb.Identity() == b.Identity() {
			t.Errorf("prefixed source has the root's identity %q", b.Identity())
		}
		prefixes, objects, _ := listAll(t, pb, "", 0)
		if !slices.Equal(prefixes, []string{"deeper/"}) || !slices.Equal(keys(objects), []string{"x.jpg"}) {
			t.Errorf("prefixed List(\"\") = %q %q, want [deeper/] [x.jpg]", prefixes, keys(objects))
		}
		_, objects, _ = listAll(t, pb, "deeper/", 0)
		if !slices.Equal(keys(objects), []string{"deeper/y.png"}) {
			t.Errorf("prefixed List(deeper/) = %q", keys(objects))
		}
		data, obj, err := pb.Get(ctx, "deeper/y.png", 100)
		if err != nil || string(data) != "deeper" || obj.Key != "deeper/y.png" {
			t.Errorf("prefixed Get = %q %+v %v", data, obj, err)
		}
		if _, err := pb.Stat(ctx, "a.jpg"); !errors.Is(err, bucket.ErrNotFound) {
			t.Errorf("prefixed Stat(a.jpg) = %v, want ErrNotFound (it is outside the prefix)", err)
		}
	})

	t.Run("Pagination", func(t *testing.T) {
		const n, pageSize = 1001, 100
		want := make([]string, 0, n)
		for i := range n {
			k := fmt.Sprintf("many/img%04d.jpg", i)
			want = append(want, k)
			s.put(t, k, []byte(k))
		}
		s.put(t, "many/dir1/x.jpg", []byte("x"))
		s.put(t, "many/dir2/y.jpg", []byte("y"))
		o := opts
		o.ListPageSize = pageSize
		pb := s.open(t, "", o)
		prefixes, objects, pages := listAll(t, pb, "many/", pageSize)
		if got := keys(objects); !slices.Equal(got, want) {
			t.Errorf("paged listing: %d objects, want %d (first diff near %v)", len(got), len(want), firstDiff(got, want))
		}
		if !slices.Equal(sorted(prefixes), []string{"many/dir1/", "many/dir2/"}) {
			t.Errorf("paged prefixes = %q", prefixes)
		}
		if min := (n + 2 + pageSize - 1) / pageSize; pages < min {
			t.Errorf("%d pages, want at least %d", pages, min)
		}
	})

	t.Run("Canceled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, _, err := b.Get(cctx, "a.jpg", 100); !errors.Is(err, context.Canceled) {
			t.Errorf("Get(canceled) = %v, want context.Canceled", err)
		}
		if _, err := b.Stat(cctx, "a.jpg"); !errors.Is(err, context.Canceled) {
			t.Errorf("Stat(canceled) = %v, want context.Canceled", err)
		}
		if _, err := b.List(cctx, "", ""); !errors.Is(err, context.Canceled) {
			t.Errorf("List(canceled) = %v, want context.Canceled", err)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for i := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				k := "a.jpg"
				if i%2 == 1 {
					k = "b/c.jpg"
				}
				data, _, err := b.Get(ctx, k, 100)
				if err == nil && !bytes.Equal(data, files[k]) {
					err = fmt.Errorf("Get(%q) = %q", k, data)
				}
				if err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("%q vs %q", a[i], b[i])
		}
	}
	return "the end"
}
