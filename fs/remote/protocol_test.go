package remote

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// TestFrameRoundTrip: frames written are read back equal; a frame whose
// data exceeds the reader's bound is refused before allocating it.
func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	if err := writeStreamHeader(&buf, 3); err != nil {
		t.Fatal(err)
	}
	frames := []Frame{
		{Index: 2, Status: StatusOK, Data: []byte("npy bytes")},
		{Index: HeartbeatIndex},
		{Index: 0, Status: StatusBadImage, Message: "not an image"},
		{Index: 1, Status: StatusOK, Data: bytes.Repeat([]byte{7}, 1000)},
	}
	for _, f := range frames {
		if err := WriteFrame(&buf, f); err != nil {
			t.Fatal(err)
		}
	}
	r := bytes.NewReader(buf.Bytes())
	if n, err := readStreamHeader(r); err != nil || n != 3 {
		t.Fatalf("header: %d, %v", n, err)
	}
	for _, want := range frames {
		got, err := ReadFrame(r, 1000)
		if err != nil || got.Index != want.Index || got.Status != want.Status || got.Message != want.Message || !bytes.Equal(got.Data, want.Data) {
			t.Fatalf("frame %+v, %v; want %+v", got, err, want)
		}
	}
	if _, err := ReadFrame(r, 1000); !errors.Is(err, io.EOF) {
		t.Errorf("after the last frame: %v, want EOF", err)
	}
	buf.Reset()
	WriteFrame(&buf, Frame{Data: make([]byte, 1001)})
	if _, err := ReadFrame(&buf, 1000); err == nil {
		t.Error("a frame over the data bound was read")
	}
	if _, err := readStreamHeader(bytes.NewReader([]byte("XXXX\x01\x00\x00\x00"))); err == nil {
		t.Error("bad magic accepted")
	}
}

// FuzzReadFrame: arbitrary bytes never panic the frame reader, and what it
// accepts respects its bounds and writes back to the same bytes.
func FuzzReadFrame(f *testing.F) {
	var buf bytes.Buffer
	WriteFrame(&buf, Frame{Index: 1, Status: 200, Message: "m", Data: []byte("data")})
	f.Add(buf.Bytes())
	buf.Reset()
	WriteFrame(&buf, Frame{Index: 2, Status: 200, Flags: FrameCompressed, Data: []byte("FFZ1")})
	f.Add(buf.Bytes())
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, 40))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := ReadFrame(bytes.NewReader(b), 1<<16)
		if err != nil {
			return
		}
		if len(fr.Data) > 1<<16 || len(fr.Message) > maxMessageLen {
			t.Fatalf("frame over its bounds: %d data, %d message bytes", len(fr.Data), len(fr.Message))
		}
		var out bytes.Buffer
		WriteFrame(&out, fr)
		in := b[:out.Len()] // the flags too
		if !bytes.Equal(out.Bytes(), in) {
			t.Fatalf("frame does not write back to its bytes")
		}
	})
}
