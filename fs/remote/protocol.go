package remote

// The wire protocol (docs/SERVE.md): JSON bodies for metadata and the framed
// binary stream of POST /v1/batch.

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/augment"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/internal/lifetime"
)

// ProtocolVersion is the version of the HTTP API; GET /v1/models reports it.
const ProtocolVersion = 1

// Content types of the API.
const (
	// BatchContentType is the framed stream answering POST /v1/batch.
	BatchContentType = "application/x-featurefs-batch"
	// NPYContentType is one .npy file (GET /v1/feature).
	NPYContentType = "application/x-npy"
)

// batchMagic starts every batch stream.
const batchMagic = "FFB1"

// HeartbeatIndex is the index of a heartbeat frame: no item, sent so that a
// client can tell a busy server from a dead one.
const HeartbeatIndex = ^uint32(0)

// frameHeaderLen is the fixed part of a frame: index, status, flags
// (reserved, zero, before EncodingFFZ1), msg_len, data_len.
const frameHeaderLen = 4 + 2 + 2 + 4 + 8

// maxMessageLen bounds an item's error message on the wire.
const maxMessageLen = 64 << 10

// Item statuses (HTTP numbers) in batch frames and whole-request errors.
const (
	StatusOK          = http.StatusOK
	StatusBadRequest  = http.StatusBadRequest
	StatusNotFound    = http.StatusNotFound
	StatusChanged     = http.StatusConflict
	StatusTooLarge    = http.StatusRequestEntityTooLarge
	StatusBadImage    = http.StatusUnprocessableEntity
	StatusInternal    = http.StatusInternalServerError
	StatusUnavailable = http.StatusServiceUnavailable
	StatusTimeout     = http.StatusGatewayTimeout
	// StatusModelChanged refuses an item asked for a model version
	// (BatchItem.Digest) the server no longer holds: the client refetches
	// GET /v1/models (docs/SERVE.md, "Model versions").
	StatusModelChanged = http.StatusPreconditionFailed
)

// ModelsVersionHeader is the header carrying ModelsResponse.Version on
// every authenticated answer: a client that sees another version than the
// one it holds refetches GET /v1/models.
const ModelsVersionHeader = "X-Featurefs-Models"

// LayerInfo is one layer of a model in GET /v1/models.
type LayerInfo struct {
	Index     int     `json:"index"`
	Name      string  `json:"name"`
	Tensor    string  `json:"tensor"`
	Shape     []int64 `json:"shape"`
	Bytes     int64   `json:"bytes"`
	CumGFLOPs float64 `json:"cum_gflops"`
	// Digest is the layer's digest (api.Layer.Digest), the identity of its
	// features: a client keys its cache and the feature store by it. A
	// server that predates digests sends none, and its features are keyed
	// by the model's Digest.
	Digest string `json:"digest,omitempty"`
}

// ModelInfo is one model in GET /v1/models.
type ModelInfo struct {
	Name          string            `json:"name"`
	Digest        string            `json:"digest"`
	Preprocess    api.Preprocess    `json:"preprocess"`
	PreprocessKey string            `json:"preprocess_key"`
	Aliases       map[string]string `json:"aliases,omitempty"`
	Layers        []LayerInfo       `json:"layers"`
	Table         string            `json:"table"`
	// LoadedAt is when the server loaded this version of the model (RFC
	// 3339 with nanoseconds, UTC): a client holding another version moves
	// to this one only when it was loaded later (docs/SERVE.md, "Model
	// versions"). Empty from a server that predates it, or whose extractor
	// does not tell: the client then moves to any other version.
	LoadedAt string `json:"loaded_at,omitempty"`
}

// Limits are the server's request bounds, in GET /v1/models.
type Limits struct {
	MaxBatchItems   int   `json:"max_batch_items"`
	MaxRequestBytes int64 `json:"max_request_bytes"`
	MaxConcurrent   int   `json:"max_concurrent"`
}

// ModelsResponse is the body of GET /v1/models.
type ModelsResponse struct {
	Protocol int `json:"protocol"`
	// Encodings are those the server sends batch answers in, besides plain
	// bytes, to a client that asks (EncodingFFZ1 with --wire-compression).
	Encodings []string    `json:"encodings,omitempty"`
	Source    string      `json:"source"`
	DType     api.DType   `json:"dtype"`
	Device    string      `json:"device"`
	Limits    Limits      `json:"limits"`
	Models    []ModelInfo `json:"models"`
	// Version names this model set (ModelsVersion): it changes when a
	// model is reloaded. Empty from a server that predates reloads.
	Version string `json:"version,omitempty"`
	// Features are the optional parts of the protocol the server
	// implements: FeatureAugment.
	Features []string `json:"features,omitempty"`
}

// FeatureAugment is a server that computes augmented views (BatchItem.Aug,
// GET /v1/viewparams). A server without it would ignore Aug and answer
// the plain feature: a client sends views only to servers that list it.
const FeatureAugment = "augment"

// ModelsVersion is the version of a model set: a digest of each model's
// name and file digest, in order.
func ModelsVersion(models []ModelInfo) string {
	h := sha256.New()
	for _, m := range models {
		fmt.Fprintf(h, "%s\x00%s\x00", m.Name, m.Digest)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// ObjectInfo is one object in GET /v1/list and GET /v1/stat.
type ObjectInfo struct {
	Key     string    `json:"key"`
	Size    int64     `json:"size"`
	ETag    string    `json:"etag"`
	ModTime time.Time `json:"mtime"`
	// Plain marks an archive's sidecar member (bucket.Object.Plain): the
	// mount shows it as it is and reads it with GET /v1/object.
	Plain bool `json:"plain,omitempty"`
}

// ListResponse is the body of GET /v1/list: one page.
type ListResponse struct {
	Prefixes []string     `json:"prefixes"`
	Objects  []ObjectInfo `json:"objects"`
	Next     string       `json:"next"`
	// Archives are bucket.Page.Archives: the prefixes that are archives'
	// directories, not real prefixes "x.tar/" (omitted when none; a server
	// without it has a mount show every "x.tar/" under its own name).
	Archives []string `json:"archives,omitempty"`
}

// BatchItem asks for one feature in POST /v1/batch.
type BatchItem struct {
	Model string `json:"model"`
	Layer int    `json:"layer"`
	Key   string `json:"key"`
	// ETag is the object version the client listed; empty: the current one.
	ETag string `json:"etag,omitempty"`
	// Digest is the layer's digest (LayerInfo.Digest) the client asks for:
	// the server computes the feature with the model version whose layer has
	// it (the current one, or the previous one it keeps after a reload), and
	// refuses the item with StatusModelChanged when it holds neither; it
	// never answers with another version's feature. Empty: the current.
	Digest string `json:"digest,omitempty"`
	// Aug, when On, asks for an augmented view of the image instead of
	// its plain feature (docs/AUGMENT.md). A server that predates it
	// ignores it: a client asks for views only of servers that list
	// "augment" in their features (ModelsResponse.Features).
	Aug AugItem `json:"aug,omitzero"`
	// Transient asks for a tensor the client finishes itself (split
	// execution, docs/SPLIT.md): the server answers it from its cache
	// when it has it, else computes it and does not store it. Plain asks
	// for it uncompressed on the wire even where the request accepts
	// EncodingFFZ1 (the split planner found the codec's CPU costs more
	// than its bytes). A server that predates them ignores both: it
	// stores and compresses as for any item.
	Transient bool `json:"transient,omitempty"`
	Plain     bool `json:"plain,omitempty"`
}

// AugItem names augmented view View of an image, drawn with Seed and the
// ranges Scale and Ratio (augment.Spec without the identity, which the
// server takes from the item's key and ETag). The zero value is the plain
// feature.
type AugItem struct {
	On    bool       `json:"on"`
	View  int        `json:"view"`
	Seed  uint64     `json:"seed"`
	Scale [2]float64 `json:"scale"`
	Ratio [2]float64 `json:"ratio"`
}

// AugItemOf is the item of spec (the zero item for nil).
func AugItemOf(spec *augment.Spec) AugItem {
	if spec == nil {
		return AugItem{}
	}
	return AugItem{On: true, View: spec.View, Seed: spec.Seed, Scale: spec.Scale, Ratio: spec.Ratio}
}

// Spec is the item's spec, without an identity.
func (a AugItem) Spec() augment.Spec {
	return augment.Spec{View: a.View, Seed: a.Seed, Scale: a.Scale, Ratio: a.Ratio}
}

// check refuses a view the server would not draw as the client does.
func (a AugItem) check() error {
	if !a.On {
		return nil
	}
	if a.View < 0 || a.View >= augment.MaxViews {
		return fmt.Errorf("augmented view %d: want 0 to %d: %w", a.View, augment.MaxViews-1, errBadItem)
	}
	if err := augment.CheckRanges(a.Scale, a.Ratio); err != nil {
		return fmt.Errorf("augmented view: %v: %w", err, errBadItem)
	}
	return nil
}

// BatchRequest is the body of POST /v1/batch.
type BatchRequest struct {
	Items []BatchItem `json:"items"`
	// Encodings are the encodings of feature data, besides the plain .npy
	// bytes, the client reads (EncodingFFZ1). A server that knows none of
	// them, or one that predates the field (it ignores it), sends plain
	// bytes; a client that names none gets plain bytes.
	Encodings []string `json:"encodings,omitempty"`
}

// EncodingFFZ1 is a cache/codec blob of the .npy bytes: a frame of an OK
// item carrying one has FrameCompressed set.
const EncodingFFZ1 = "ffz1"

// FrameCompressed, in a frame's flags, marks data that is a cache/codec
// blob of the .npy bytes. Only sent to clients that asked for EncodingFFZ1.
const FrameCompressed = 1

// ErrorResponse is the JSON body of a failed request.
type ErrorResponse struct {
	Error  string `json:"error"`
	Status int    `json:"status"`
}

// Frame is one frame of a batch stream: the answer to item Index, or a
// heartbeat (Index == HeartbeatIndex).
type Frame struct {
	Index   uint32
	Status  uint16
	Flags   uint16 // FrameCompressed
	Message string
	Data    []byte
}

func objectInfo(o bucket.Object) ObjectInfo {
	return ObjectInfo{Key: o.Key, Size: o.Size, ETag: o.ETag, ModTime: o.ModTime, Plain: o.Plain}
}

func (o ObjectInfo) object() bucket.Object {
	return bucket.Object{Key: o.Key, Size: o.Size, ETag: o.ETag, ModTime: o.ModTime, Plain: o.Plain}
}

// writeStreamHeader starts a batch stream of n items.
func writeStreamHeader(w io.Writer, n int) error {
	var b [8]byte
	copy(b[:4], batchMagic)
	binary.LittleEndian.PutUint32(b[4:], uint32(n))
	_, err := w.Write(b[:])
	return err
}

// readStreamHeader reads the start of a batch stream and returns its item
// count.
func readStreamHeader(r io.Reader) (int, error) {
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, fmt.Errorf("batch stream header: %w", err)
	}
	if string(b[:4]) != batchMagic {
		return 0, fmt.Errorf("batch stream: bad magic %q", b[:4])
	}
	return int(binary.LittleEndian.Uint32(b[4:])), nil
}

// WriteFrame writes one frame.
func WriteFrame(w io.Writer, f Frame) error {
	msg := f.Message
	if len(msg) > maxMessageLen {
		msg = msg[:maxMessageLen]
	}
	var h [frameHeaderLen]byte
	binary.LittleEndian.PutUint32(h[0:], f.Index)
	binary.LittleEndian.PutUint16(h[4:], f.Status)
	binary.LittleEndian.PutUint16(h[6:], f.Flags)
	binary.LittleEndian.PutUint32(h[8:], uint32(len(msg)))
	binary.LittleEndian.PutUint64(h[12:], uint64(len(f.Data)))
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	if _, err := io.WriteString(w, msg); err != nil {
		return err
	}
	_, err := w.Write(f.Data)
	return err
}

// frameHeader is the fixed part of a frame, as received.
type frameHeader struct {
	Index   uint32
	Status  uint16
	Flags   uint16
	MsgLen  uint32
	DataLen uint64
}

// frameChunk is the most a frame reader allocates before the bytes it
// allocates for arrive: a length read from the wire buys at most this much
// memory until the data comes (readBounded).
const frameChunk = 1 << 20

// readFrameHeader reads a frame's fixed part; a message longer than
// maxMessageLen is an error matching ErrBadAnswer.
func readFrameHeader(r io.Reader) (frameHeader, error) {
	var b [frameHeaderLen]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return frameHeader{}, err
	}
	h := frameHeader{Index: binary.LittleEndian.Uint32(b[0:]), Status: binary.LittleEndian.Uint16(b[4:]), Flags: binary.LittleEndian.Uint16(b[6:]),
		MsgLen: binary.LittleEndian.Uint32(b[8:]), DataLen: binary.LittleEndian.Uint64(b[12:])}
	if h.MsgLen > maxMessageLen {
		return frameHeader{}, fmt.Errorf("%w: batch frame: message of %d bytes (at most %d)", ErrBadAnswer, h.MsgLen, maxMessageLen)
	}
	return h, nil
}

// readBounded reads exactly n bytes, growing its buffer as they arrive:
// it starts at frameChunk at most and at most doubles, so that it never
// holds more than twice what was received (and frameChunk) whatever n
// says. n must already be checked against the caller's cap.
func readBounded(r io.Reader, n uint64) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	buf := make([]byte, 0, min(n, frameChunk))
	for uint64(len(buf)) < n {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, int(min(n, 2*uint64(cap(buf))))-len(buf))
		}
		m, err := io.ReadFull(r, buf[len(buf):min(uint64(cap(buf)), n)])
		buf = buf[:len(buf)+m]
		if err != nil {
			return nil, noEOF(err)
		}
	}
	return buf, nil
}

// ReadFrame reads one frame; data longer than maxData is an error (a
// corrupt or hostile stream must not make the client allocate without
// bound), and the data within it is allocated as it arrives (readBounded).
func ReadFrame(r io.Reader, maxData int64) (Frame, error) {
	h, err := readFrameHeader(r)
	if err != nil {
		return Frame{}, err
	}
	if maxData < 0 || h.DataLen > uint64(maxData) {
		return Frame{}, fmt.Errorf("batch frame: %d data bytes (at most %d)", h.DataLen, maxData)
	}
	return readFrameBody(r, h)
}

// readFrameBody reads the message and data of a frame whose lengths the
// caller checked.
func readFrameBody(r io.Reader, h frameHeader) (Frame, error) {
	f := Frame{Index: h.Index, Status: h.Status, Flags: h.Flags}
	msg, err := readBounded(r, uint64(h.MsgLen))
	if err != nil {
		return Frame{}, fmt.Errorf("batch frame: %w", err)
	}
	f.Message = string(msg)
	if f.Data, err = readBounded(r, h.DataLen); err != nil {
		return Frame{}, fmt.Errorf("batch frame: %w", err)
	}
	return f, nil
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// errBadItem is matched by errors for items naming an unknown model or
// layer, or no key.
var errBadItem = errors.New("bad request")

// ErrUnavailable is matched by errors from a server that did not answer
// (connection refused, reset, or silent past the client's timeout) or
// answered that its source is unavailable.
var ErrUnavailable = errors.New("feature server unavailable")

// ErrUnauthorized is matched when a server refuses the client's token. It
// matches bucket.ErrAccessDenied too: to a mount of servers, a refused token
// is its store refusing the credentials, and its readers get EACCES.
var ErrUnauthorized error = unauthorizedError{}

// unauthorizedError is ErrUnauthorized's type.
type unauthorizedError struct{}

func (unauthorizedError) Error() string { return "feature server refused the token (401)" }

// Is makes ErrUnauthorized match bucket.ErrAccessDenied.
func (unauthorizedError) Is(target error) bool { return target == bucket.ErrAccessDenied }

// StatusOf maps a server-side error to the status reported for it.
func StatusOf(err error) int {
	switch {
	case err == nil:
		return StatusOK
	case errors.Is(err, errBadItem), errors.Is(err, api.ErrUnknownModel), errors.Is(err, api.ErrUnknownLayer):
		return StatusBadRequest
	case errors.Is(err, bucket.ErrNotFound), errors.Is(err, syscall.ENAMETOOLONG):
		// A name too long for the source's file system names no object.
		return StatusNotFound
	case errors.Is(err, features.ErrObjectChanged):
		return StatusChanged
	case errors.Is(err, api.ErrModelReplaced):
		return StatusModelChanged
	case errors.Is(err, bucket.ErrTooLarge):
		return StatusTooLarge
	case errors.Is(err, api.ErrBadImage):
		return StatusBadImage
	case errors.Is(err, context.DeadlineExceeded):
		return StatusTimeout
	case errors.Is(err, bucket.ErrUnreachable), errors.Is(err, ErrUnavailable), errors.Is(err, lifetime.ErrClosed):
		return StatusUnavailable // a closing server too: the client fails over
	}
	return StatusInternal
}

// ErrorOf maps a status and message from server to the error the client
// returns, matching the same sentinel errors as on the server (so that the
// mount's errno mapping and negative cache see a bad image as a bad image).
func ErrorOf(status int, msg, server, key string) error {
	where := strings.TrimRight(server, "/")
	switch status {
	case StatusOK:
		return nil
	case StatusBadImage:
		return &api.ImageError{Key: key, Reason: msg + " (" + where + ")"}
	case StatusNotFound:
		return fmt.Errorf("%s: %s: %w", where, msg, bucket.ErrNotFound)
	case StatusChanged:
		// The pipeline's own error, so that a mount of servers treats a
		// changed object as a local mount does (it reads the new version).
		return fmt.Errorf("%s: %s: %w", where, msg, features.ErrObjectChanged)
	case StatusTooLarge:
		return fmt.Errorf("%s: %s: %w", where, msg, bucket.ErrTooLarge)
	case StatusModelChanged:
		return fmt.Errorf("%s: %s: %w", where, msg, api.ErrModelReplaced)
	case StatusBadRequest:
		return fmt.Errorf("%s: %s: %w", where, msg, errBadItem)
	case http.StatusUnauthorized:
		return fmt.Errorf("%s: %w", where, ErrUnauthorized)
	case StatusUnavailable:
		return fmt.Errorf("%s: %s: %w", where, msg, ErrUnavailable)
	case StatusTimeout:
		return fmt.Errorf("%s: %s: %w", where, msg, ErrServerTimeout)
	}
	return fmt.Errorf("%s: status %d: %s", where, status, msg)
}

// ErrServerTimeout is matched when the server gave up on an item
// (--item-timeout).
var ErrServerTimeout = errors.New("timed out on the feature server")

// viewParamsItem parses GET /v1/viewparams's query: the item and its view.
func viewParamsItem(q url.Values) (BatchItem, error) {
	bad := func(name string) (BatchItem, error) {
		return BatchItem{}, fmt.Errorf("%s %s: %w", name, echo(q.Get(name)), errBadItem)
	}
	it, err := queryItem(q)
	if err != nil {
		return BatchItem{}, err
	}
	view, err := strconv.Atoi(q.Get("view"))
	if err != nil {
		return bad("view")
	}
	seed, err := strconv.ParseUint(q.Get("seed"), 10, 64)
	if err != nil {
		return bad("seed")
	}
	var ranges [2][2]float64
	for i, name := range []string{"scale", "ratio"} {
		lo, hi, ok := strings.Cut(q.Get(name), ",")
		a, err1 := strconv.ParseFloat(lo, 64)
		b, err2 := strconv.ParseFloat(hi, 64)
		if !ok || err1 != nil || err2 != nil {
			return bad(name)
		}
		ranges[i] = [2]float64{a, b}
	}
	if it.Model == "" {
		return bad("model")
	}
	it.Aug = AugItem{On: true, View: view, Seed: seed, Scale: ranges[0], Ratio: ranges[1]}
	return it, nil
}

// queryItem is the item GET /v1/feature and /v1/viewparams name in their
// query: model, layer (an index), key, etag and digest.
func queryItem(q url.Values) (BatchItem, error) {
	layer, err := strconv.Atoi(q.Get("layer"))
	if err != nil {
		return BatchItem{}, fmt.Errorf("layer %s: want a layer index: %w", echo(q.Get("layer")), errBadItem)
	}
	return BatchItem{Model: q.Get("model"), Layer: layer, Key: q.Get("key"), ETag: q.Get("etag"), Digest: q.Get("digest")}, nil
}

// viewParamsQuery is the query of GET /v1/viewparams for it.
func viewParamsQuery(it BatchItem) url.Values {
	q := url.Values{}
	q.Set("model", it.Model)
	q.Set("layer", strconv.Itoa(it.Layer))
	q.Set("key", it.Key)
	q.Set("etag", it.ETag)
	q.Set("digest", it.Digest)
	q.Set("view", strconv.Itoa(it.Aug.View))
	q.Set("seed", strconv.FormatUint(it.Aug.Seed, 10))
	q.Set("scale", strconv.FormatFloat(it.Aug.Scale[0], 'g', -1, 64)+","+strconv.FormatFloat(it.Aug.Scale[1], 'g', -1, 64))
	q.Set("ratio", strconv.FormatFloat(it.Aug.Ratio[0], 'g', -1, 64)+","+strconv.FormatFloat(it.Aug.Ratio[1], 'g', -1, 64))
	return q
}
