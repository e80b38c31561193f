// Package mountpoint prepares and releases the directory a FUSE file system
// is mounted on: it finds what is mounted where (/proc/self/mountinfo),
// clears a stale FUSE mount whose server is gone, refuses a directory that
// is missing, in use or not empty, and unmounts, lazily when the mount is
// busy, and sets the mount's readahead (SetReadAhead). It knows nothing
// of featurefs's tree.
package mountpoint

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Check makes sure dir can be mounted on: a directory that no live FUSE
// file system is mounted on (a stale FUSE mount, whose server is gone and
// which answers ENOTCONN, is cleared first; a bind mount or another file
// system's mount, such as a pod's volume, is a directory like any other),
// and empty unless allowNonempty (a mount would hide its files; fuse
// refuses that by default too). Its errors say what to do. log may be nil.
func Check(dir string, allowNonempty bool, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if fstype, _, ok := MountedOn(dir); ok && strings.HasPrefix(fstype, "fuse") {
		// stat may be answered from the kernel's attribute cache; reading
		// the directory reaches the server, or fails if it is gone.
		if _, err := os.ReadDir(dir); errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED) {
			log.Warn("featurefs: clearing a stale mount (its server is gone)", slog.String("mountpoint", dir), slog.String("type", fstype))
			if err := detach(dir); err != nil {
				return fmt.Errorf("mount point %s: a stale mount is there and cannot be removed (%v): run 'umount -l %s'", dir, err, dir)
			}
		}
	}
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("mount point %s does not exist: create it with mkdir -p %s", dir, dir)
	case err != nil:
		return fmt.Errorf("mount point %s: %w", dir, err)
	case !st.IsDir():
		return fmt.Errorf("mount point %s is not a directory", dir)
	}
	// A live FUSE mount is refused: mounting over it would hide a file
	// system someone is serving (featurefs's own, or another's). Any other
	// mount is an ordinary directory to mount on: every Kubernetes
	// volumeMount (an emptyDir, a hostPath) is a bind mount, and so is a
	// container runtime's volume; gcsfuse and Mountpoint mount over them.
	if fstype, src, ok := MountedOn(dir); ok && strings.HasPrefix(fstype, "fuse") {
		return fmt.Errorf("mount point %s is in use: %s (%s) is mounted there; unmount it first with 'umount %s'", dir, src, fstype, dir)
	}
	if allowNonempty {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("mount point %s: %w", dir, err)
	}
	names, err := d.Readdirnames(1)
	d.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("mount point %s: %w", dir, err)
	}
	if len(names) > 0 {
		return fmt.Errorf("mount point %s is not empty (it holds %q, ...): mounting would hide its files; use an empty directory, or pass --allow-nonempty to mount over them", dir, names[0])
	}
	return nil
}

// Unmount calls un (the FUSE server's unmount), retrying while the mount is
// busy, then detaches the mount lazily: it goes once its last user leaves.
// go-fuse's unmount returns only once its request loops have, and they run
// until the last copy of the mount is gone: a copy propagated into another
// mount namespace and in use there (a pod's other container reading
// through it) keeps them running, so a caller that must end in time waits
// for Unmount with a bound (cmd/featurefs: unmountWithin). log may be nil.
func Unmount(un func() error, dir string, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var err error
	for range 5 {
		if err = un(); err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	log.Warn("featurefs: mount busy; detaching it lazily", slog.String("mountpoint", dir), slog.Any("err", err))
	if err := detach(dir); err != nil {
		log.Error("featurefs: unmount failed", slog.String("mountpoint", dir), slog.Any("err", err))
	}
}

// detach unmounts dir lazily: umount2(MNT_DETACH) as root, else
// fusermount3 -u -z.
func detach(dir string) error {
	err := syscall.Unmount(dir, syscall.MNT_DETACH)
	if err == nil {
		return nil
	}
	out, ferr := exec.Command("fusermount3", "-u", "-z", dir).CombinedOutput()
	if ferr == nil {
		return nil
	}
	return fmt.Errorf("%v; fusermount3: %s", err, strings.TrimSpace(string(out)))
}

// MountedOn looks dir up in /proc/self/mountinfo and returns the type and
// source of what is mounted there (the last mount, when several are
// stacked).
func MountedOn(dir string) (fstype, source string, ok bool) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", "", false
	}
	return parseMountinfo(string(data), dir)
}

// parseMountinfo finds dir in the text of a mountinfo file.
func parseMountinfo(text, dir string) (fstype, source string, ok bool) {
	for line := range strings.SplitSeq(text, "\n") {
		// id parent major:minor root mountpoint options ... - fstype source superopts
		fields := strings.Fields(line)
		if len(fields) < 5 || unescape(fields[4]) != dir {
			continue
		}
		for i, f := range fields {
			if f == "-" && i+2 < len(fields) {
				fstype, source = fields[i+1], unescape(fields[i+2])
			}
		}
		ok = true
	}
	return fstype, source, ok
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// SetReadAhead sets the readahead of the file system mounted on dir to kb
// KiB (its backing device's read_ahead_kb in sysfs, which only root may
// write): the file is written, never created, never through a symbolic
// link.
func SetReadAhead(dir string, kb int) error {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return err
	}
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	_, err = f.Write([]byte(strconv.Itoa(kb)))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
