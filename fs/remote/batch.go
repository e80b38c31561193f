package remote

// Batching on the client: Extract calls are queued per server (readers'
// before prefetch's), gathered into batches of at most MaxBatch items that
// wait at most MaxWait to fill, and sent with at most MaxInFlight batches
// per server in flight; MaxPending bounds each queue.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
)

// server is one feature server and its batching queues: readers'
// requests (fg) go out before prefetch's (bg).
type server struct {
	url    string
	c      *Client
	fg, bg chan *call
	slots  chan struct{}

	// vmu guards seen, the models version of the server's last answer,
	// and older, the one version of its that the client judged older
	// than its own (versions.go; "" when none): one per server.
	vmu         sync.Mutex
	seen, older string
}

// call is one feature request waiting for its batch.
type call struct {
	item BatchItem
	ctx  context.Context
	done chan struct{}
	data []byte
	wire int // the bytes data took on the wire (less when compressed)
	err  error
}

// newServer returns server u's queues, empty; its loop is started by Dial.
func newServer(c *Client, u string) *server {
	return &server{url: u, c: c, fg: make(chan *call, c.cfg.MaxPending), bg: make(chan *call, c.cfg.MaxPending),
		slots: make(chan struct{}, c.cfg.MaxInFlight)}
}

// itemOpts are a batch item's split-execution flags (BatchItem.Transient
// and Plain).
type itemOpts struct{ transient, plain bool }

// extract queues req, for the layer at digest, on the server its key is routed to, in the
// foreground or background queue by its priority, and waits for the answer,
// counting the request in the client's figures.
func (c *Client) extract(ctx context.Context, req api.Request, digest string, opts itemOpts) ([]byte, int, error) {
	c.n.requests.Add(1)
	c.n.inFlight.Add(1)
	defer c.n.inFlight.Add(-1)
	if req.Augment != nil && !c.views {
		c.n.failed.Add(1)
		return nil, 0, fmt.Errorf("extract %s: the feature servers do not compute augmented views (a featurefs serve older than --augment)", req.Key)
	}
	cl := &call{item: BatchItem{Model: req.Model, Layer: req.Layer, Key: req.Key, ETag: req.ETag, Digest: digest, Aug: AugItemOf(req.Augment),
		Transient: opts.transient, Plain: opts.plain}, ctx: ctx, done: make(chan struct{})}
	s := c.route(req.Key)
	queue := s.fg
	if req.Priority == api.Background {
		queue = s.bg
	}
	select {
	case queue <- cl:
	case <-ctx.Done():
		c.n.failed.Add(1)
		return nil, 0, ctx.Err()
	case <-c.stop:
		return nil, 0, fmt.Errorf("extract %s: %w: client closed", req.Key, ErrUnavailable)
	}
	select {
	case <-cl.done:
	case <-ctx.Done():
		c.n.failed.Add(1)
		return nil, 0, ctx.Err()
	}
	switch {
	case cl.err == nil:
		c.n.completed.Add(1)
	case errors.Is(cl.err, api.ErrBadImage):
		c.n.badImages.Add(1)
		c.n.failed.Add(1)
	default:
		c.n.failed.Add(1)
	}
	return cl.data, cl.wire, cl.err
}

// loop gathers queued calls into batches: a batch waits up to MaxWait to
// fill, then for a free slot (MaxInFlight per server), filling up to
// MaxBatch while it waits. Foreground calls are taken before background
// ones.
func (s *server) loop() {
	c := s.c
	closed := fmt.Errorf("%w: client closed", ErrUnavailable)
	for {
		var batch []*call
		if cl := s.take(); cl != nil {
			batch = append(batch, cl)
		} else {
			select {
			case cl := <-s.fg:
				batch = append(batch, cl)
			case cl := <-s.bg:
				batch = append(batch, cl)
			case <-c.stop:
				s.drain()
				return
			}
		}
		timer := time.NewTimer(c.cfg.MaxWait)
	fill:
		for len(batch) < c.cfg.MaxBatch {
			if cl := s.take(); cl != nil {
				batch = append(batch, cl)
				continue
			}
			select {
			case cl := <-s.fg:
				batch = append(batch, cl)
			case cl := <-s.bg:
				batch = append(batch, cl)
			case <-timer.C:
				break fill
			case <-c.stop:
				timer.Stop()
				s.fail(batch, closed)
				s.drain()
				return
			}
		}
		timer.Stop()
	slot:
		for {
			if len(batch) < c.cfg.MaxBatch {
				if cl := s.take(); cl != nil {
					batch = append(batch, cl)
					continue
				}
			}
			var fg, bg chan *call // nil (never ready) once the batch is full
			if len(batch) < c.cfg.MaxBatch {
				fg, bg = s.fg, s.bg
			}
			select {
			case s.slots <- struct{}{}:
				break slot
			case cl := <-fg:
				batch = append(batch, cl)
			case cl := <-bg:
				batch = append(batch, cl)
			case <-c.stop:
				s.fail(batch, closed)
				s.drain()
				return
			}
		}
		if !c.owner.Go(func() {
			defer func() { <-s.slots }()
			s.send(batch)
		}) {
			<-s.slots
			s.fail(batch, closed)
			s.drain()
			return
		}
	}
}

// take returns a queued call without waiting, foreground first, or nil.
func (s *server) take() *call {
	select {
	case cl := <-s.fg:
		return cl
	default:
	}
	select {
	case cl := <-s.bg:
		return cl
	default:
		return nil
	}
}

// drain fails every queued call (the client is closing).
func (s *server) drain() {
	for cl := s.take(); cl != nil; cl = s.take() {
		s.fail([]*call{cl}, fmt.Errorf("%w: client closed", ErrUnavailable))
	}
}

// fail finishes calls with err.
func (s *server) fail(calls []*call, err error) {
	for _, cl := range calls {
		if cl != nil {
			cl.err = fmt.Errorf("%s: %w", cl.item.Key, err)
			close(cl.done)
		}
	}
}

// send makes one POST /v1/batch (postBatch) of the calls whose readers
// still wait, and answers each call as its frame comes; the calls left
// unanswered when the batch fails get its error.
func (s *server) send(batch []*call) {
	// Calls whose reader gave up are not sent.
	live := batch[:0]
	for _, cl := range batch {
		if err := cl.ctx.Err(); err != nil {
			cl.err = err
			close(cl.done)
			continue
		}
		live = append(live, cl)
	}
	batch = live
	if len(batch) == 0 {
		return
	}
	items := make([]BatchItem, len(batch))
	for i, cl := range batch {
		items[i] = cl.item
	}
	answered := make([]bool, len(batch))
	err := s.c.postBatch(s.url, items, func(i int, data []byte, wire int, err error) {
		cl := batch[i]
		answered[i] = true
		cl.data, cl.wire, cl.err = data, wire, err
		close(cl.done)
	})
	if err != nil {
		var rest []*call
		for i, cl := range batch {
			if !answered[i] {
				rest = append(rest, cl)
			}
		}
		s.fail(rest, err)
	}
}
