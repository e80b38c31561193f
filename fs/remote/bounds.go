package remote

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/featurefs/featurefs/fs/features"
)

// byteBudget bounds bytes held at once (answers computed and not yet
// written).
type byteBudget struct {
	max int64

	mu      sync.Mutex
	free    int64         // GUARDED_BY(mu)
	changed chan struct{} // GUARDED_BY(mu): closed and replaced on every release
}

func newByteBudget(max int64) *byteBudget {
	return &byteBudget{max: max, free: max, changed: make(chan struct{})}
}

// acquire waits until n bytes (at most the whole budget) are free and
// takes them; it returns how many it took.
func (b *byteBudget) acquire(ctx context.Context, n int64) (int64, error) {
	n = min(max(n, 0), b.max)
	for {
		b.mu.Lock()
		if b.free >= n {
			b.free -= n
			b.mu.Unlock()
			return n, nil
		}
		ch := b.changed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, fmt.Errorf("waiting for answer buffer space: %w", ctx.Err())
		}
	}
}

// release gives back n bytes taken by acquire.
func (b *byteBudget) release(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	b.free += n
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

// inUse is the number of bytes taken.
func (b *byteBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.max - b.free
}

// itemBytes is the size of an item's .npy answer (0 for an item that will
// fail: an unknown model or layer).
func (s *Server) itemBytes(it BatchItem) int64 {
	m, ok := s.ex.Model(it.Model)
	if !ok || it.Layer < 0 || it.Layer >= len(m.Layers) {
		return 0
	}
	// Layer.Bytes is per sample as float32.
	return m.Layers[it.Layer].Bytes/4*int64(s.ex.DType().Size()) + npyHeaderBytes
}

// checkKey refuses a key no source holds: empty, or over MaxKeyBytes.
func checkKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("item needs a model and a key: %w", errBadItem)
	case len(key) > MaxKeyBytes:
		return fmt.Errorf("key of %d bytes: at most %d: %w", len(key), MaxKeyBytes, errBadItem)
	}
	return nil
}

// MaxEchoBytes bounds the bytes of a client's input (a key, a model name,
// a query parameter) that an error sent back shows: a longer one is shown
// quoted, cut at this many bytes, then "..." and its length (echo).
const MaxEchoBytes = 200

// echo is a client's input s as an error sent back shows it: quoted
// (strconv.Quote), and when longer than MaxEchoBytes its first
// MaxEchoBytes bytes at most (cut before a rune, never inside one), then
// "..." and its length in bytes, so that a 5,000-byte key is not sent
// back whole.
func echo(s string) string {
	if len(s) <= MaxEchoBytes {
		return strconv.Quote(s)
	}
	cut := MaxEchoBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "... (" + strconv.Itoa(len(s)) + " bytes)"
}

// public is the error a client is told: the status's sentinel with a
// message that names the key but none of the server's paths (the source's
// root, the cache directory: those stay in the server's log), a key longer
// than MaxEchoBytes cut (echo). An internal error says only that.
func (s *Server) public(key string, err error) error {
	if StatusOf(err) == StatusInternal {
		return fmt.Errorf("%s: internal server error (the server's log has the details)", key)
	}
	msg := err.Error()
	id := s.bucket.Identity()
	roots := []string{id}
	if root, ok := strings.CutPrefix(id, "file://"); ok && root != "" && root != "/" {
		roots = append(roots, root)
	}
	for _, root := range roots {
		msg = strings.ReplaceAll(msg, root+"/", "")
		msg = strings.ReplaceAll(msg, root, "<source>")
	}
	shown := key
	if len(key) > MaxEchoBytes {
		// A key too long to send back whole is shown cut (echo),
		// wherever the message names it.
		shown = echo(key)
		msg = strings.ReplaceAll(msg, strconv.Quote(key), shown)
		msg = strings.ReplaceAll(msg, key, shown)
	}
	if key != "" && StatusOf(err) != StatusBadImage && !strings.Contains(msg, shown) {
		msg = shown + ": " + msg
	}
	return errors.New(msg)
}

// logItemError logs an item's error with the server's paths in it: at
// WARN for an internal error, at DEBUG otherwise (a missing object or a
// bad image is the client's business, and bad objects are logged once by
// the pipeline).
func (s *Server) logItemError(op, key string, err error) {
	if StatusOf(err) == StatusInternal {
		s.log.Warn("featurefs serve: "+op+" failed", slog.String("key", key), slog.Any("err", err))
		return
	}
	if !errors.Is(err, features.ErrNotImage) {
		s.log.Debug("featurefs serve: "+op+" failed", slog.String("key", key), slog.Any("err", err))
	}
}
