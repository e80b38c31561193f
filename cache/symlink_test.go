package cache

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/featurefs/featurefs/cache/safefile"
)

// TestOpenRefusesPlantedLinks: a link planted at the lock file's name, or
// at a name Badger creates, makes Open fail with one line naming it, and
// its target is not written (issue 36, item 3). On ca82ffd the lock file's
// link was followed: the victim was truncated to the holder's pid.
func TestOpenRefusesPlantedLinks(t *testing.T) {
	for _, name := range []string{lockFileName, "MANIFEST", "000001.vlog"} {
		t.Run(name, func(t *testing.T) {
			victim := filepath.Join(t.TempDir(), "victim")
			if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := os.Symlink(victim, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
			s, err := openWithin(t, dir)
			if err == nil {
				s.Close()
			}
			if b, rerr := os.ReadFile(victim); rerr != nil || string(b) != "precious\n" {
				t.Errorf("victim written through %s: %q", name, b)
			}
			if !errors.Is(err, safefile.ErrSymlink) {
				t.Fatalf("Open with a link at %s: %v; want it refused (ErrSymlink)", name, err)
			}
		})
	}
}
