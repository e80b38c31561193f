// Package archivetest builds hostile archives for tests and fuzz seeds:
// the cases found by attacking the archive readers, in one place for the
// package's unit tests and the mount's integration tests.
package archivetest

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Zip writes a zip archive of the named members (stored when method is
// zip.Store, else deflated), in the order given.
func Zip(method uint16, names []string, data [][]byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for i, name := range names {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: method})
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(data[i]); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Zip64 rewrites the end of zip archive z (one without a comment or zip64
// records, as Zip writes it) into the zip64 form: a zip64 end record with
// the real figures, a locator naming it at recAt, and an end record whose
// fields are all 0xffff/0xffffffff (so a reader must follow the locator).
// With recAt the record's real offset the archive is a valid zip64 one;
// with 1<<63-1 it is the locator whose offset once wrapped a bounds check
// negative and panicked the mount.
func Zip64(z []byte, recAt uint64) ([]byte, error) {
	const eocdLen = 22
	if len(z) < eocdLen || binary.LittleEndian.Uint32(z[len(z)-eocdLen:]) != 0x06054b50 {
		return nil, fmt.Errorf("archivetest: no end record at the end of %d bytes", len(z))
	}
	e := z[len(z)-eocdLen:]
	entries := uint64(binary.LittleEndian.Uint16(e[10:]))
	dirSize := uint64(binary.LittleEndian.Uint32(e[12:]))
	dirAt := uint64(binary.LittleEndian.Uint32(e[16:]))
	body := bytes.Clone(z[:len(z)-eocdLen])
	if recAt == 0 {
		recAt = uint64(len(body))
	}
	le := binary.LittleEndian
	out := le.AppendUint32(body, 0x06064b50) // zip64 end record
	out = le.AppendUint64(out, 44)
	out = le.AppendUint16(out, 45)
	out = le.AppendUint16(out, 45)
	out = le.AppendUint32(out, 0)
	out = le.AppendUint32(out, 0)
	out = le.AppendUint64(out, entries)
	out = le.AppendUint64(out, entries)
	out = le.AppendUint64(out, dirSize)
	out = le.AppendUint64(out, dirAt)
	out = le.AppendUint32(out, 0x07064b50) // its locator
	out = le.AppendUint32(out, 0)
	out = le.AppendUint64(out, recAt)
	out = le.AppendUint32(out, 1)
	out = le.AppendUint32(out, 0x06054b50) // the end record, every field saying "see zip64"
	out = le.AppendUint16(out, 0)
	out = le.AppendUint16(out, 0)
	out = le.AppendUint16(out, 0xffff)
	out = le.AppendUint16(out, 0xffff)
	out = le.AppendUint32(out, 0xffffffff)
	out = le.AppendUint32(out, 0xffffffff)
	out = le.AppendUint16(out, 0)
	return out, nil
}

// OverDeclared is a zip of n deflated members named m0.jpg, m1.jpg, ...,
// each of data's bytes but declaring declare bytes (within the zip bomb
// ratio when data compresses poorly), with data's CRC: a reader that
// allocates what a member declares spends declare bytes on each.
func OverDeclared(n int, data []byte, declare uint64) ([]byte, error) {
	var comp bytes.Buffer
	fw, err := flate.NewWriter(&comp, flate.BestSpeed)
	if err != nil {
		return nil, err
	}
	fw.Write(data)
	if err := fw.Close(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for i := range n {
		w, err := zw.CreateRaw(&zip.FileHeader{
			Name: fmt.Sprintf("m%d.jpg", i), Method: zip.Deflate,
			CRC32: crc32.ChecksumIEEE(data), CompressedSize64: uint64(comp.Len()), UncompressedSize64: declare,
		})
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(comp.Bytes()); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
