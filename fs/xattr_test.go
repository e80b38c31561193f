package fs

import (
	"errors"
	"syscall"
	"testing"
)

// TestNoExtendedAttributes: the tree has no extended attributes, and says
// so once for the whole mount (ENOSYS), so that the kernel stops asking:
// ls -l asked for two per file, each a round trip. A getxattr then fails
// with EOPNOTSUPP (ENODATA would mean featurefs was asked).
func TestNoExtendedAttributes(t *testing.T) {
	b := newFakeBucket(1000)
	b.put("d/1.jpg", []byte("one"))
	e := testMount(t, b)
	buf := make([]byte, 64)
	for _, p := range []string{e.path("features", "tiny", "layer0", "d", "1.npy"), e.path("features", "tiny", "layer0", "d")} {
		for range 2 {
			if _, err := syscall.Getxattr(p, "security.selinux", buf); !errors.Is(err, syscall.EOPNOTSUPP) {
				t.Errorf("getxattr %s: %v, want EOPNOTSUPP", p, err)
			}
			if _, err := syscall.Listxattr(p, buf); !errors.Is(err, syscall.EOPNOTSUPP) {
				t.Errorf("listxattr %s: %v, want EOPNOTSUPP", p, err)
			}
		}
	}
}
