package cache

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/featurefs/featurefs/cache/codec"
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
	// flagsFile marks a pointer record: the value's record (header,
	// chunk table, bytes or codec blob) is in its file.
	flagsFile = 3
	// flagsRawFile marks a pointer record that holds the value's header
	// and chunk table itself: its file holds exactly the value's bytes,
	// so that the kernel can read it as the feature file (FUSE
	// passthrough, OpenFile). Uncompressed values are stored so.
	flagsRawFile = 4
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

// encodeRawPtr returns the pointer record for a file holding exactly the
// bytes of i's value, whose chunked header and table are head
// (encodeHead): the pointer header (length: the file's, flags
// flagsRawFile, CRC over the id and the rest), then head.
func encodeRawPtr(i id, head []byte, n int) []byte {
	p := make([]byte, headerLen+len(head))
	copy(p, magic[:])
	binary.LittleEndian.PutUint32(p[8:], uint32(n))
	binary.LittleEndian.PutUint32(p[12:], flagsRawFile)
	copy(p[headerLen:], head)
	c := crc32.Update(crc32.Update(0, castagnoli, i[:]), castagnoli, p[8:])
	binary.LittleEndian.PutUint32(p[4:], c)
	return p
}

// isPtr reports whether rec is a pointer record.
func isPtr(rec []byte) bool {
	if len(rec) < headerLen || [4]byte(rec[:4]) != magic {
		return false
	}
	f := binary.LittleEndian.Uint32(rec[12:])
	return f == flagsFile || f == flagsRawFile
}

// filePtr is a parsed pointer record.
type filePtr struct {
	recLen int64   // the file's length
	crc    [4]byte // the file record's header CRC (flagsFile)
	// head is the value's chunked header and table (flagsRawFile: the
	// file holds only the bytes); empty for a file holding the record.
	head string
}

// raw reports whether the file holds exactly the value's bytes.
func (p filePtr) raw() bool { return p.head != "" }

func parsePtr(i id, p []byte) (filePtr, error) {
	if len(p) >= headerLen && binary.LittleEndian.Uint32(p[12:]) == flagsRawFile {
		return parseRawPtr(i, p)
	}
	if len(p) != ptrLen {
		return filePtr{}, fmt.Errorf("%w: file pointer of %d bytes", errChecksum, len(p))
	}
	c := crc32.Update(crc32.Update(0, castagnoli, i[:]), castagnoli, p[8:])
	if c != binary.LittleEndian.Uint32(p[4:]) {
		return filePtr{}, fmt.Errorf("%w: file pointer crc", errChecksum)
	}
	return filePtr{recLen: int64(binary.LittleEndian.Uint32(p[8:])), crc: [4]byte(p[headerLen:])}, nil
}

// parseRawPtr parses a flagsRawFile pointer, checking its CRC and that
// its header and table are a chunked frame of the file's length.
func parseRawPtr(i id, p []byte) (filePtr, error) {
	if len(p) < 2*headerLen {
		return filePtr{}, fmt.Errorf("%w: file pointer of %d bytes", errChecksum, len(p))
	}
	seed := crc32.Update(0, castagnoli, i[:])
	if crc32.Update(seed, castagnoli, p[8:]) != binary.LittleEndian.Uint32(p[4:]) {
		return filePtr{}, fmt.Errorf("%w: file pointer crc", errChecksum)
	}
	n := binary.LittleEndian.Uint32(p[8:])
	head := p[headerLen:]
	if [4]byte(head[:4]) != magic || binary.LittleEndian.Uint32(head[12:]) != flagsChunked ||
		binary.LittleEndian.Uint32(head[8:]) != n || len(head) != headerLen+4*numChunks(int(n)) ||
		crc32.Update(seed, castagnoli, head[8:]) != binary.LittleEndian.Uint32(head[4:]) {
		return filePtr{}, fmt.Errorf("%w: file pointer's chunk table", errChecksum)
	}
	return filePtr{recLen: int64(n), head: string(head)}, nil
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
		return chmodDir(d, dirMode) // whatever the umask, or an earlier mode
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

// tmpFile is a file writeFile wrote, not yet in place: its path, and the
// inode, length and modification time it had after the last write.
type tmpFile struct {
	path        string
	dev, ino    uint64
	size, mtime int64 // mtime in nanoseconds
}

// writeFile writes the record parts (concatenated) to a temporary file
// next to i's file and returns it, to be renamed into place (placeFile).
// The file is created 0600 with O_EXCL|O_NOFOLLOW; with SyncWrites it is
// fsynced.
func (s *Store) writeFile(i id, parts ...[]byte) (tmpFile, error) {
	final := s.filePath(i)
	sub := filepath.Dir(final)
	// The fan-out directories are made at open; one replaced by a
	// symlink is refused, never written through.
	if info, err := os.Lstat(sub); err != nil || !info.IsDir() {
		if err == nil {
			err = fmt.Errorf("%s is not a directory (a symlink is refused)", sub)
		}
		return tmpFile{}, err
	}
	tmp := filepath.Join(sub, fmt.Sprintf("%s%s-%d-%d", tmpPrefix, i, os.Getpid(), tmpSeq.Add(1)))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fileMode)
	if err != nil {
		return tmpFile{}, err
	}
	for _, p := range parts {
		if _, err = f.Write(p); err != nil {
			break
		}
	}
	if err == nil && s.syncWrites {
		err = f.Sync()
	}
	var st unix.Stat_t
	if err == nil {
		err = unix.Fstat(int(f.Fd()), &st)
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
		return tmpFile{}, err
	}
	return tmpFile{path: tmp, dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano()}, nil
}

// placeFile renames tmp to i's file (with SyncWrites, fsyncing its
// directory so the rename is durable before the index entry), and
// remembers its FileID as one this Store wrote (see wroteFiles).
func (s *Store) placeFile(i id, tmp tmpFile) error {
	final := s.filePath(i)
	err := os.Rename(tmp.path, final)
	s.forgetFile(i) // after the rename: an open of the file replaced is not cached
	if err != nil {
		os.Remove(tmp.path)
		return err
	}
	// The rename changed the inode's ctime: its FileID is taken now, and
	// kept only if the name still holds the inode written, with the
	// length and modification time it had after the last write (a write
	// between that and this Lstat changes the modification time).
	var st unix.Stat_t
	if unix.Lstat(final, &st) == nil && st.Dev == tmp.dev && st.Ino == tmp.ino &&
		st.Size == tmp.size && st.Mtim.Nano() == tmp.mtime {
		s.wrote.add(i, fileIDOf(&st))
	}
	if s.syncWrites {
		if d, _, err := openDir(filepath.Dir(final)); err == nil {
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
	s.wrote.drop(i)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("cache: remove feature file", "id", i.String(), "err", err)
	}
	return err == nil
}

// openFile opens i's file for reading (openRegular: without blocking or
// following a symbolic link, a regular file only) and checks its length
// against the pointer. A missing file is (nil, nil); anything but a
// regular file of the pointer's length is an error matching errChecksum
// (a miss: the entry is dropped, said once).
func (s *Store) openFile(i id, p filePtr) (*os.File, error) {
	f, st, err := openRegular(s.filePath(i))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if isNotRegularOrLink(err) {
		return nil, fmt.Errorf("%w: %v", errChecksum, err)
	}
	if err != nil {
		return nil, err
	}
	if st.Size != p.recLen {
		f.Close()
		return nil, fmt.Errorf("%w: feature file of %d bytes, index says %d", errChecksum, st.Size, p.recLen)
	}
	return f, nil
}

// preadFull reads len(b) bytes of f at off with pread; fewer (the file
// shrank since its length was checked) or a read error is an error
// matching errChecksum: the value is dropped and recomputed.
func preadFull(f *os.File, b []byte, off int64) error {
	if _, err := f.ReadAt(b, off); err != nil {
		return fmt.Errorf("%w: feature file, %d bytes at %d: %v", errChecksum, len(b), off, err)
	}
	return nil
}

// readWholeFile reads i's whole file into a new buffer. A missing file is
// (nil, nil).
func (s *Store) readWholeFile(i id, p filePtr) ([]byte, error) {
	f, err := s.openFile(i, p)
	if f == nil {
		return nil, err
	}
	defer f.Close()
	if p.raw() {
		// The record is the pointer's header and table, then the file.
		rec := make([]byte, len(p.head)+int(p.recLen))
		copy(rec, p.head)
		if err := preadFull(f, rec[len(p.head):], 0); err != nil {
			return nil, err
		}
		return rec, nil
	}
	rec := make([]byte, p.recLen)
	if err := preadFull(f, rec, 0); err != nil {
		return nil, err
	}
	if len(rec) < headerLen || [4]byte(rec[4:8]) != p.crc {
		return nil, fmt.Errorf("%w: feature file's header differs from its index entry", errChecksum)
	}
	return rec, nil
}

// fileReadAt is readAtVerified for a value in a file: one pread of the
// header and chunk table, one of the chunks the range touches, verified
// (a compressed value: readRecordAt). A file is never mapped: one that
// shrank since its length was checked (truncated under an open
// descriptor) reads short, which is a checksum miss, never a fault.
func fileReadAt(i id, f *os.File, p filePtr, dst []byte, off int64) (int, int, error) {
	var meta []byte
	base := int64(0) // where the bytes start in the file
	if p.raw() {
		meta = []byte(p.head) // parsePtr checked it is a chunked frame's
	} else {
		// The table of a chunked record of recLen bytes is at most this long.
		metaLen := min(p.recLen, headerLen+4*int64(numChunks(int(max(p.recLen-headerLen, 0)))))
		meta = make([]byte, metaLen)
		if metaLen < headerLen {
			return 0, 0, fmt.Errorf("%w: feature file of %d bytes", errChecksum, metaLen)
		}
		if err := preadFull(f, meta, 0); err != nil {
			return 0, 0, err
		}
		if [4]byte(meta[4:8]) != p.crc {
			return 0, 0, fmt.Errorf("%w: feature file's header differs from its index entry", errChecksum)
		}
	}
	n := int64(binary.LittleEndian.Uint32(meta[8:]))
	size := int(n)
	nc := numChunks(size)
	tl := 4 * nc
	if !p.raw() {
		base = headerLen + int64(tl)
	}
	if [4]byte(meta[:4]) != magic || binary.LittleEndian.Uint32(meta[12:]) != flagsChunked ||
		base+n != p.recLen {
		// Compressed (or not what it should be).
		return readRecordAt(i, f, p.recLen, dst, off)
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
	if err := preadFull(f, buf, base+int64(cs)); err != nil {
		return 0, size, err
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

// wroteFiles remembers, by FileID, the feature files this Store wrote,
// up to wroteFilesSize of them (an arbitrary one forgotten to make room).
// OpenFile does not verify such a file again while its FileID is
// unchanged: its chunks' CRCs were computed over the very bytes written,
// and any write to the file since (through the file system) changes its
// ctime, so what it would check is the bytes' round trip through the
// page cache that it checks for no other reader either. Epoch 1's
// read-back of a feature prefetch just wrote so costs no CRC pass over
// 803 KB at the open that hands it to the kernel.
type wroteFiles struct {
	mu sync.Mutex
	m  map[id]FileID
}

// wroteFilesSize bounds wroteFiles: 40 bytes a file, about 2.6 MiB.
const wroteFilesSize = 1 << 16

func (w *wroteFiles) add(i id, fid FileID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = make(map[id]FileID)
	}
	if _, ok := w.m[i]; !ok && len(w.m) >= wroteFilesSize {
		for o := range w.m {
			delete(w.m, o)
			break
		}
	}
	w.m[i] = fid
}

func (w *wroteFiles) has(i id, fid FileID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	got, ok := w.m[i]
	return ok && got == fid
}

func (w *wroteFiles) drop(i id) {
	w.mu.Lock()
	delete(w.m, i)
	w.mu.Unlock()
}

func (w *wroteFiles) clear() {
	w.mu.Lock()
	w.m = nil
	w.mu.Unlock()
}

// forgetAllFiles closes every cached open file (Clear, Close).
func (s *Store) forgetAllFiles() {
	s.wrote.clear()
	c := &s.fds
	c.mu.Lock()
	c.gen++
	for i, e := range c.m {
		c.removeLocked(i, e)
	}
	c.lru = nil
	c.mu.Unlock()
}

// errNotRawFile is OpenFile's answer for a value not stored as a plain
// file of exactly its bytes (in Badger, compressed, or a file written
// with its header): not an error, a value the mount reads as before.
var errNotRawFile = errors.New("cache: value not in a plain file")

// FileID identifies one version of a feature file on disk: its inode, its
// length, and its modification and change times in nanoseconds (a write
// to the file through the file system, by write(2) or through a shared
// mapping, changes both; a truncation its length too; an unlink, chmod or
// link its change time). OpenFile skips the verification of a file whose
// FileID is the one its caller verified before; a caller that holds a
// file OpenFile returned compares FileIDOf(f) with it to tell whether the
// file changed since (its check then no longer holds).
type FileID struct {
	Dev, Ino           uint64
	Size, Mtime, Ctime int64 // Mtime and Ctime in nanoseconds
}

// OpenFile returns k's value as a file open for reading that holds exactly
// its bytes, its size and its FileID, when the value is stored so
// (uncompressed and at least Options.FileThreshold long): the mount hands
// it to the kernel (FUSE passthrough), whose reads of the feature file then
// go to it without the mount. Since those reads bypass the cache's checks,
// every chunk's CRC is verified here first, read with pread (never
// mapped: verifyRawFile) through the page cache the kernel's reads then
// find warm, unless the file's FileID equals verified (the same inode,
// length and times as when the caller had it verified) or is one this
// Store wrote itself and has not been written since (wroteFiles); a file
// that fails (or is missing, not a regular file, or of another length) is
// a miss and its entry deleted, as for Get: it is never returned. The
// caller closes the file. A miss, or a value stored any other way, is
// (nil, 0, FileID{}, false, nil); it counts a hit only when it returns a
// file.
//
// The file returned is the one the index named when it was opened: a Put
// that replaces the value (the same key: the same bytes) or an eviction
// renames or unlinks the name, and the open file keeps the old inode (and
// its disk space) until closed.
func (s *Store) OpenFile(k Key, verified FileID) (*os.File, int64, FileID, bool, error) {
	i := k.id()
	var out *os.File
	var size int64
	var fid FileID
	ok, err := s.read(k, func([]byte, bool) error { return errNotRawFile }, func(cf *os.File, p filePtr) error {
		if !p.raw() {
			return errNotRawFile
		}
		// A descriptor of its own on the file ReadAt's open files keep
		// (opened, length checked, without following a symlink).
		fd, err := unix.FcntlInt(cf.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("cache: dup feature file: %w", err)
		}
		f := os.NewFile(uintptr(fd), cf.Name())
		// Its FileID is taken before the check: a write during the
		// check changes it, so the next open checks again.
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			f.Close()
			return err
		}
		if st.Size != p.recLen { // truncated or extended since it was opened
			f.Close()
			return fmt.Errorf("%w: feature file of %d bytes, index says %d", errChecksum, st.Size, p.recLen)
		}
		fid = fileIDOf(&st)
		if fid != verified && !s.wrote.has(i, fid) {
			s.fileVerifies.Add(1)
			if err := verifyRawFile(i, f, p); err != nil {
				f.Close()
				return err
			}
		}
		out, size = f, p.recLen
		s.auto.handed.add(i) // never compacted under a holder (compact.go)
		return nil
	})
	if errors.Is(err, errNotRawFile) {
		return nil, 0, FileID{}, false, nil
	}
	if !ok || out == nil {
		return nil, 0, FileID{}, false, err
	}
	return out, size, fid, true, nil
}

// verifyBlock is how much of a file verifyRawFile reads with one pread: a
// whole number of chunks.
const verifyBlock = 16 * chunkSize

// verifyRawFile checks every chunk of a flagsRawFile file against its
// pointer's table, reading it with pread verifyBlock at a time into a
// pooled buffer (never a mapping: a file that shrank reads short, a
// checksum miss). The reads go through the page cache, which the kernel's
// reads of the file then find warm.
func verifyRawFile(i id, f *os.File, p filePtr) error {
	n := int(p.recLen)
	bp := getBuf(min(n, verifyBlock))
	defer putBuf(bp)
	fr := frame{seed: crc32.Update(0, castagnoli, i[:]), table: []byte(p.head[headerLen:])}
	for at := 0; at < n; at += verifyBlock {
		blk := (*bp)[:min(verifyBlock, n-at)]
		if err := preadFull(f, blk, int64(at)); err != nil {
			return err
		}
		for c := 0; c < len(blk); c += chunkSize {
			if err := fr.verifyChunk((at+c)/chunkSize, blk[c:min(c+chunkSize, len(blk))]); err != nil {
				return err
			}
		}
	}
	return nil
}

// bufPool holds the buffers the reads of files use (readRecordAt's
// records, verifyRawFile's blocks): one per read in flight, reused; one
// over maxPooledBuf is not kept.
var bufPool sync.Pool // *[]byte

const maxPooledBuf = 8 << 20

// getBuf returns a buffer of n bytes, from the pool when it has one large
// enough.
func getBuf(n int) *[]byte {
	if bp, _ := bufPool.Get().(*[]byte); bp != nil {
		if cap(*bp) >= n {
			*bp = (*bp)[:n]
			return bp
		}
		bufPool.Put(bp)
	}
	b := make([]byte, n)
	return &b
}

func putBuf(bp *[]byte) {
	if cap(*bp) <= maxPooledBuf {
		bufPool.Put(bp)
	}
}

// readRecordAt is readAtVerified for a record in a file that is not a
// chunked frame of the file's length (a codec blob, a flags-0 record, or
// damage), read with pread into a pooled buffer of the record's length
// rather than mapped (a file truncated under a mapping faults the
// process). Of a codec blob it reads only its header and chunk table and
// the chunks the range touches (codec.Span), as a mapping would have
// paged in; anything else it reads whole. The codec's and the frame's
// checks then see exactly the bytes read: a file that shrank reads short
// (errChecksum), and bytes changed since are a checksum failure.
func readRecordAt(i id, f *os.File, recLen int64, dst []byte, off int64) (int, int, error) {
	bp := getBuf(int(recLen))
	defer putBuf(bp)
	rec := *bp
	head := min(len(rec), headerLen+codec.HeaderLen)
	if err := preadFull(f, rec[:head], 0); err != nil {
		return 0, 0, err
	}
	if head < headerLen || binary.LittleEndian.Uint32(rec[12:]) != flagsCodec {
		if err := preadFull(f, rec[head:], int64(head)); err != nil {
			return 0, 0, err
		}
		return readAtVerified(i, rec, dst, off)
	}
	blob := rec[headerLen:]
	meta, err := codec.MetaLen(blob[:head-headerLen])
	if err != nil || meta > len(blob) {
		// Not a blob: readAtVerified says what is wrong with the header.
		return readAtVerified(i, rec[:head], dst, off)
	}
	if err := preadFull(f, blob[codec.HeaderLen:meta], int64(headerLen+codec.HeaderLen)); err != nil {
		return 0, 0, err
	}
	// The header and table are in; the chunks the read decodes next.
	// Span fails only where readAtVerified's parse does, on the bytes
	// read: it then reports the damage.
	if start, end, err := codec.Span(blob, off, len(dst)); err == nil && end > start {
		if err := preadFull(f, blob[start:end], int64(headerLen+start)); err != nil {
			return 0, 0, err
		}
	}
	return readAtVerified(i, rec, dst, off)
}
