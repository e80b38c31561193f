package cache

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// Large values live in files, one per value, outside Badger's value log:
// Badger's single writer goroutine copies every value into a shared mmap of
// the value log, which serialized Puts and cost 1.3-2.5 ms of CPU per MB on
// a disk with a large readahead (docs/CACHE.md). A value whose record is at
// least Options.FileThreshold bytes is written with write(2) to a file of
// its own,
//
//	DIR/files/XX/ID
//
// (XX the first byte of the key's ID in hex, ID all of it), holding exactly
// the record Badger would have held (header, chunk CRCs, bytes; or a codec
// blob). Badger keeps the index: under the value key a small pointer record
// (flagsFile) with the file record's length and header CRC, next to the
// metadata record as before.
//
// Order of a Put: the record is written to a temporary file created with
// O_EXCL|O_NOFOLLOW in the same directory (fsynced with SyncWrites), renamed
// to its name, then the index entry committed. A kill -9 at any point leaves
// either the old entry or the new one: a temporary file, or a file without
// index entry, is removed at the next open (sweepFiles); an index entry
// whose file is missing or of another length reads as a miss and is dropped.
// Eviction and Delete delete the index entry first, then the file: the disk
// space is free at once, without value-log GC.
const (
	filesDir = "files"
	// flagsFile marks a pointer record: the value is in its file.
	flagsFile = 3
	// ptrLen is a pointer record's length: the header, then the file
	// record's header CRC (uint32).
	ptrLen = headerLen + 4
	// DefaultFileThreshold is the record size from which a value goes to a
	// file of its own (Options.FileThreshold): below it, Badger's inline
	// path costs less than a file's create, rename and unlink.
	DefaultFileThreshold = 64 << 10
	tmpPrefix            = ".tmp-"
)

var tmpSeq atomic.Uint64

// filePath returns the path of i's file.
func (s *Store) filePath(i id) string {
	h := i.String()
	return filepath.Join(s.dir, filesDir, h[:2], h)
}

// encodePtr returns the pointer record for a file holding the record of i
// of recLen bytes that starts with head.
func encodePtr(i id, head []byte, recLen int) []byte {
	p := make([]byte, ptrLen)
	copy(p, magic[:])
	binary.LittleEndian.PutUint32(p[8:], uint32(recLen))
	binary.LittleEndian.PutUint32(p[12:], flagsFile)
	copy(p[headerLen:], head[4:8])
	c := crc32.Update(crc32.Update(0, castagnoli, i[:]), castagnoli, p[8:])
	binary.LittleEndian.PutUint32(p[4:], c)
	return p
}

// isPtr reports whether rec is a pointer record.
func isPtr(rec []byte) bool {
	return len(rec) >= headerLen && [4]byte(rec[:4]) == magic && binary.LittleEndian.Uint32(rec[12:]) == flagsFile
}

// filePtr is a parsed pointer record.
type filePtr struct {
	recLen int64
	crc    [4]byte // the file record's header CRC
}

func parsePtr(i id, p []byte) (filePtr, error) {
	if len(p) != ptrLen {
		return filePtr{}, fmt.Errorf("%w: file pointer of %d bytes", errChecksum, len(p))
	}
	c := crc32.Update(crc32.Update(0, castagnoli, i[:]), castagnoli, p[8:])
	if c != binary.LittleEndian.Uint32(p[4:]) {
		return filePtr{}, fmt.Errorf("%w: file pointer crc", errChecksum)
	}
	return filePtr{recLen: int64(binary.LittleEndian.Uint32(p[8:])), crc: [4]byte(p[headerLen:])}, nil
}

// makeFilesDir creates DIR/files and its 256 fan-out directories 0700,
// refusing a symlink in their place (so a Put makes no directory).
func makeFilesDir(dir string) error {
	root := filepath.Join(dir, filesDir)
	if err := mkdirPrivate(root); err != nil {
		return err
	}
	for b := range 256 {
		if err := mkdirPrivate(filepath.Join(root, fmt.Sprintf("%02x", b))); err != nil {
			return err
		}
	}
	return nil
}

// mkdirPrivate creates d 0700 if missing; an existing d must be a directory,
// not a symlink.
func mkdirPrivate(d string) error {
	err := os.Mkdir(d, dirMode)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	info, lerr := os.Lstat(d)
	if lerr != nil {
		return lerr
	}
	if !info.IsDir() {
		return fmt.Errorf("%s is not a directory (a symlink is refused)", d)
	}
	if info.Mode().Perm() != dirMode {
		return os.Chmod(d, dirMode) // whatever the umask, or an earlier mode
	}
	return nil
}

// encodeHead returns the header and chunk table of v's chunked record
// (flags 1): followed by v it is encodeValue's record, written to a file in
// two writes without copying v.
func encodeHead(i id, v []byte) []byte {
	nc := numChunks(len(v))
	head := make([]byte, headerLen+4*nc)
	copy(head, magic[:])
	binary.LittleEndian.PutUint32(head[8:], uint32(len(v)))
	binary.LittleEndian.PutUint32(head[12:], flagsChunked)
	seed := crc32.Update(0, castagnoli, i[:])
	for k := range nc {
		binary.LittleEndian.PutUint32(head[headerLen+4*k:], chunkCRC(seed, k, v[k*chunkSize:min((k+1)*chunkSize, len(v))]))
	}
	binary.LittleEndian.PutUint32(head[4:], crc32.Update(seed, castagnoli, head[8:]))
	return head
}

// writeFile writes the record parts (concatenated) to a temporary file
// next to i's file and returns its path, to be renamed into place
// (placeFile). The file is created 0600 with O_EXCL|O_NOFOLLOW; with
// SyncWrites it is fsynced.
func (s *Store) writeFile(i id, parts ...[]byte) (string, error) {
	final := s.filePath(i)
	sub := filepath.Dir(final)
	// The fan-out directories are made at open; one replaced by a
	// symlink is refused, never written through.
	if info, err := os.Lstat(sub); err != nil || !info.IsDir() {
		if err == nil {
			err = fmt.Errorf("%s is not a directory (a symlink is refused)", sub)
		}
		return "", err
	}
	tmp := filepath.Join(sub, fmt.Sprintf("%s%s-%d-%d", tmpPrefix, i, os.Getpid(), tmpSeq.Add(1)))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fileMode)
	if err != nil {
		return "", err
	}
	for _, p := range parts {
		if _, err = f.Write(p); err != nil {
			break
		}
	}
	if err == nil && s.syncWrites {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		if errors.Is(err, syscall.ENOSPC) {
			s.diskFull(-1)
			err = fmt.Errorf("%w: %v", ErrDiskFull, err)
		}
		return "", err
	}
	return tmp, nil
}

// placeFile renames tmp to i's file (with SyncWrites, fsyncing its
// directory so the rename is durable before the index entry).
func (s *Store) placeFile(i id, tmp string) error {
	final := s.filePath(i)
	err := os.Rename(tmp, final)
	s.forgetFile(i) // after the rename: an open of the file replaced is not cached
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if s.syncWrites {
		if d, err := os.Open(filepath.Dir(final)); err == nil {
			err = d.Sync()
			d.Close()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// removeFile deletes i's file, if any, and reports whether there was one.
func (s *Store) removeFile(i id) bool {
	err := os.Remove(s.filePath(i))
	s.forgetFile(i) // after the unlink: an open that raced with it is not cached
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("cache: remove feature file", "id", i.String(), "err", err)
	}
	return err == nil
}

// openFile opens i's file for reading without following a symlink and
// checks its length against the pointer. A missing file is (nil, nil).
func (s *Store) openFile(i id, p filePtr) (*os.File, error) {
	f, err := os.OpenFile(s.filePath(i), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%w: feature file is a symlink", errChecksum)
	}
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !info.Mode().IsRegular() || info.Size() != p.recLen {
		f.Close()
		return nil, fmt.Errorf("%w: feature file of %d bytes, index says %d", errChecksum, info.Size(), p.recLen)
	}
	return f, nil
}

// readWholeFile reads i's whole file into a new buffer. A missing file is
// (nil, nil).
func (s *Store) readWholeFile(i id, p filePtr) ([]byte, error) {
	f, err := s.openFile(i, p)
	if f == nil {
		return nil, err
	}
	defer f.Close()
	rec := make([]byte, p.recLen)
	if _, err := io.ReadFull(f, rec); err != nil {
		return nil, err
	}
	if len(rec) < headerLen || [4]byte(rec[4:8]) != p.crc {
		return nil, fmt.Errorf("%w: feature file's header differs from its index entry", errChecksum)
	}
	return rec, nil
}

// fileReadAt is readAtVerified for a value in a file: one pread of the
// header and chunk table, one of the chunks the range touches, verified
// (a compressed value is read whole).
func fileReadAt(i id, f *os.File, p filePtr, dst []byte, off int64) (int, int, error) {
	// The table of a chunked record of recLen bytes is at most this long.
	metaLen := min(p.recLen, headerLen+4*int64(numChunks(int(max(p.recLen-headerLen, 0)))))
	meta := make([]byte, metaLen)
	if _, err := f.ReadAt(meta, 0); err != nil || metaLen < headerLen {
		return 0, 0, fmt.Errorf("%w: feature file header: %v", errChecksum, err)
	}
	if [4]byte(meta[4:8]) != p.crc {
		return 0, 0, fmt.Errorf("%w: feature file's header differs from its index entry", errChecksum)
	}
	n := int64(binary.LittleEndian.Uint32(meta[8:]))
	size := int(n)
	nc := numChunks(size)
	tl := 4 * nc
	if [4]byte(meta[:4]) != magic || binary.LittleEndian.Uint32(meta[12:]) != flagsChunked ||
		headerLen+int64(tl)+n != p.recLen {
		// Compressed (or not what it should be): map it, so that the
		// codec decodes only the chunks the range touches from the page
		// cache, as from Badger's value log. The length was checked
		// against the index just now; files are only ever replaced by a
		// rename or unlinked, never truncated, so the mapping stays whole.
		m, err := syscall.Mmap(int(f.Fd()), 0, int(p.recLen), syscall.PROT_READ, syscall.MAP_SHARED)
		if err != nil {
			return 0, 0, fmt.Errorf("cache: map feature file: %w", err)
		}
		defer syscall.Munmap(m)
		return readAtVerified(i, m, dst, off)
	}
	fr := frame{seed: crc32.Update(0, castagnoli, i[:]), table: meta[headerLen : headerLen+tl]}
	if got := crc32.Update(fr.seed, castagnoli, meta[8:headerLen+tl]); got != binary.LittleEndian.Uint32(meta[4:]) {
		return 0, size, fmt.Errorf("%w: header crc %08x", errChecksum, got)
	}
	if off < 0 {
		return 0, size, fmt.Errorf("cache: read at negative offset %d", off)
	}
	if off >= int64(size) {
		return 0, size, nil
	}
	if len(dst) == 0 {
		return 0, size, nil
	}
	end := min(int(off)+len(dst), size)
	k0, k1 := int(off)/chunkSize, (end-1)/chunkSize
	cs, ce := k0*chunkSize, min((k1+1)*chunkSize, size)
	var buf []byte
	if int(off) == cs && end == ce {
		// Whole chunks (the kernel's reads are aligned): read them into
		// dst and verify them there; on an error dst holds no answer
		// (0 bytes returned).
		buf = dst[:ce-cs]
	} else {
		buf = make([]byte, ce-cs)
	}
	if _, err := f.ReadAt(buf, int64(headerLen+tl+cs)); err != nil {
		return 0, size, fmt.Errorf("%w: feature file: %v", errChecksum, err)
	}
	for k := k0; k <= k1; k++ {
		a, b := k*chunkSize-cs, min((k+1)*chunkSize, size)-cs
		if err := fr.verifyChunk(k, buf[a:b]); err != nil {
			return 0, size, err
		}
	}
	if &buf[0] == &dst[0] {
		return len(buf), size, nil
	}
	return copy(dst, buf[int(off)-cs:end-cs]), size, nil
}

// sweepFiles removes, at open, temporary files and files without an index
// entry (a kill -9 between a file's rename and its index entry, or between
// an eviction's index delete and its unlink). Anything that is not a
// regular file is removed too (nothing here is ever followed).
func (s *Store) sweepFiles() {
	root := filepath.Join(s.dir, filesDir)
	subs, err := os.ReadDir(root)
	if err != nil {
		return
	}
	var removed int
	for _, sd := range subs {
		sub := filepath.Join(root, sd.Name())
		if !sd.IsDir() {
			if os.Remove(sub) == nil {
				removed++
			}
			continue
		}
		ents, err := os.ReadDir(sub)
		if err != nil {
			continue
		}
		for _, e := range ents {
			name := e.Name()
			keep := false
			if b, err := hex.DecodeString(name); err == nil && len(b) == IDLen && e.Type().IsRegular() &&
				strings.HasPrefix(name, sd.Name()) {
				s.mu.Lock()
				_, keep = s.idx.lookup(id(b))
				s.mu.Unlock()
			}
			if !keep && os.RemoveAll(filepath.Join(sub, name)) == nil {
				removed++
			}
		}
	}
	if removed > 0 {
		s.log.Info("cache: removed feature files without index entries (an interrupted write or eviction)",
			"dir", s.dir, "files", removed)
	}
}

// removeFilesDir deletes every feature file (Clear).
func (s *Store) removeFilesDir() error {
	return os.RemoveAll(filepath.Join(s.dir, filesDir))
}

// fdCacheSize bounds the feature files kept open for ReadAt.
const fdCacheSize = 64

// fdCache keeps the last feature files ReadAt opened open, so that the
// mount's reads of one feature (a ReadAt per kernel read, 128 KiB each)
// open it once rather than once per read. Every unlink or replacement of
// a file (removeFile, placeFile) drops its entry first and bumps gen, so
// an open that raced with it is not cached: no file is held open after
// its value is evicted (its disk space is freed at once).
type fdCache struct {
	mu  sync.Mutex
	gen uint64
	m   map[id]*fdEntry
	lru []id // insertion order, oldest first; may hold ids since removed
}

type fdEntry struct {
	f    *os.File
	p    filePtr
	refs int
	dead bool // out of the cache: closed when the last user releases it
}

// acquireFile returns i's open file for the pointer p, from the cache or
// opened now; a missing file is (nil, nil). releaseFile gives it back.
func (s *Store) acquireFile(i id, p filePtr) (*fdEntry, error) {
	c := &s.fds
	c.mu.Lock()
	if e, ok := c.m[i]; ok && e.p == p {
		e.refs++
		c.mu.Unlock()
		return e, nil
	}
	gen := c.gen
	c.mu.Unlock()
	f, err := s.openFile(i, p)
	if f == nil {
		return nil, err
	}
	e := &fdEntry{f: f, p: p, refs: 1}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		e.dead = true // a file was unlinked or replaced meanwhile: don't keep it
		return e, nil
	}
	if c.m == nil {
		c.m = make(map[id]*fdEntry)
	}
	if old, ok := c.m[i]; ok {
		c.removeLocked(i, old)
	}
	c.m[i] = e
	c.lru = append(c.lru, i)
	for len(c.m) > fdCacheSize && len(c.lru) > 0 {
		o := c.lru[0]
		c.lru = c.lru[1:]
		if oe, ok := c.m[o]; ok {
			c.removeLocked(o, oe)
		}
	}
	if len(c.lru) > 4*fdCacheSize { // ids removed meanwhile: rebuild
		c.lru = c.lru[:0]
		for k := range c.m {
			c.lru = append(c.lru, k)
		}
	}
	return e, nil
}

func (c *fdCache) removeLocked(i id, e *fdEntry) {
	delete(c.m, i)
	e.dead = true
	if e.refs == 0 {
		e.f.Close()
	}
}

func (s *Store) releaseFile(e *fdEntry) {
	c := &s.fds
	c.mu.Lock()
	e.refs--
	if e.dead && e.refs == 0 {
		e.f.Close()
	}
	c.mu.Unlock()
}

// forgetFile drops i's open file, if cached (its file is being unlinked or
// replaced).
func (s *Store) forgetFile(i id) {
	c := &s.fds
	c.mu.Lock()
	c.gen++
	if e, ok := c.m[i]; ok {
		c.removeLocked(i, e)
	}
	c.mu.Unlock()
}

// forgetAllFiles closes every cached open file (Clear, Close).
func (s *Store) forgetAllFiles() {
	c := &s.fds
	c.mu.Lock()
	c.gen++
	for i, e := range c.m {
		c.removeLocked(i, e)
	}
	c.lru = nil
	c.mu.Unlock()
}
