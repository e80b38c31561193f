package extractor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeSession counts live sessions and fails if used after close.
type fakeSession struct {
	live   *atomic.Int64
	closed atomic.Bool
}

func (f *fakeSession) run(n int, in, out []float32) error {
	if f.closed.Load() {
		return errors.New("session used after close")
	}
	return nil
}

func (f *fakeSession) close() error {
	if f.closed.Swap(true) {
		return errors.New("closed twice")
	}
	f.live.Add(-1)
	return nil
}

func TestSessionPoolIsBoundedAndNeverClosesHeldSessions(t *testing.T) {
	var live, opened, peak atomic.Int64
	p := newSessionPool(2, func(k sessionKey) (inferSession, error) {
		n := live.Add(1)
		opened.Add(1)
		for {
			old := peak.Load()
			if n <= old || peak.CompareAndSwap(old, n) {
				break
			}
		}
		return &fakeSession{live: &live}, nil
	})
	ctx := context.Background()
	a, err := p.acquire(ctx, sessionKey{model: "m", layer: 0})
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.acquire(ctx, sessionKey{model: "m", layer: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Both held: a third layer waits rather than exceeding the bound.
	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	if _, err := p.acquire(short, sessionKey{model: "m", layer: 2}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third session while two are held: %v, want to wait", err)
	}
	// Sharing: the same key gives the same session.
	a2, err := p.acquire(ctx, sessionKey{model: "m", layer: 0})
	if err != nil || a2 != a {
		t.Fatalf("same key: %v, %v", a2, err)
	}
	got := make(chan *pooled)
	go func() {
		c, err := p.acquire(ctx, sessionKey{model: "m", layer: 2})
		if err != nil {
			t.Error(err)
		}
		got <- c
	}()
	p.release(a)
	p.release(a2) // a is now the only idle session: it is the one to go
	c := <-got
	if err := b.s.run(1, nil, nil); err != nil {
		t.Fatalf("held session b: %v", err)
	}
	if !a.s.(*fakeSession).closed.Load() {
		t.Error("the idle session was not the one evicted")
	}
	p.release(b)
	p.release(c)

	// Many goroutines over 20 layers with a bound of 2.
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				e, err := p.acquire(ctx, sessionKey{model: "m", layer: (g + i) % 20})
				if err != nil {
					t.Error(err)
					return
				}
				if err := e.s.run(1, nil, nil); err != nil {
					t.Error(err)
				}
				p.release(e)
			}
		}()
	}
	wg.Wait()
	if pk := peak.Load(); pk > 2 {
		t.Errorf("peak live sessions %d > bound 2", pk)
	}
	if l, created, evicted := p.stats(); l > 2 || created != opened.Load() || evicted != created-int64(l) {
		t.Errorf("stats live %d created %d evicted %d (opened %d)", l, created, evicted, opened.Load())
	}
	p.close()
	if live.Load() != 0 {
		t.Errorf("%d sessions alive after close", live.Load())
	}
	if _, err := p.acquire(ctx, sessionKey{model: "m", layer: 0}); err == nil {
		t.Error("acquire after close succeeded")
	}
}

func TestSessionPoolOpenErrorIsNotCached(t *testing.T) {
	var calls atomic.Int64
	var live atomic.Int64
	p := newSessionPool(1, func(k sessionKey) (inferSession, error) {
		if calls.Add(1) == 1 {
			return nil, errors.New("transient")
		}
		live.Add(1)
		return &fakeSession{live: &live}, nil
	})
	defer p.close()
	if _, err := p.acquire(context.Background(), sessionKey{model: "m", layer: 0}); err == nil {
		t.Fatal("want the open error")
	}
	e, err := p.acquire(context.Background(), sessionKey{model: "m", layer: 0})
	if err != nil {
		t.Fatal(err)
	}
	p.release(e)
}

// TestSessionPoolClosesIdleSessionsUnderPressure: with a memory target
// (pressure), opening a session first closes idle ones, least recently
// used first, until the opening fits; a held session is never closed, and
// with none idle the opening goes ahead.
func TestSessionPoolClosesIdleSessionsUnderPressure(t *testing.T) {
	var live atomic.Int64
	p := newSessionPool(8, func(k sessionKey) (inferSession, error) {
		live.Add(1)
		return &fakeSession{live: &live}, nil
	})
	// Room for two open sessions before an opening: a third presses.
	p.pressure = func(sessionKey) bool { return live.Load() >= 2 }
	ctx := context.Background()
	key := func(l int) sessionKey { return sessionKey{model: "m", layer: l} }
	open := func(l int) *pooled {
		e, err := p.acquire(ctx, key(l))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	a := open(0)
	p.release(a)
	b := open(1)
	p.release(b)
	c := open(2) // a (least recently used) closes; b stays
	if !a.s.(*fakeSession).closed.Load() || b.s.(*fakeSession).closed.Load() {
		t.Fatalf("opening a third: a closed %v, b closed %v; want a only", a.s.(*fakeSession).closed.Load(), b.s.(*fakeSession).closed.Load())
	}
	if n := p.pressedOut(); n != 1 {
		t.Errorf("closed for memory: %d, want 1", n)
	}
	// b idle, c held: opening a fourth closes b, never c.
	d := open(3)
	if !b.s.(*fakeSession).closed.Load() || c.s.(*fakeSession).closed.Load() {
		t.Fatalf("opening a fourth with c held: b closed %v, c closed %v; want b only", b.s.(*fakeSession).closed.Load(), c.s.(*fakeSession).closed.Load())
	}
	// c and d held, none idle: a fifth opens anyway.
	e := open(4)
	if c.s.(*fakeSession).closed.Load() || d.s.(*fakeSession).closed.Load() || live.Load() != 3 {
		t.Fatalf("a fifth with every session held: %d live; want c, d and e open", live.Load())
	}
	for _, x := range []*pooled{c, d, e} {
		p.release(x)
	}
	if live, created, evicted := p.stats(); live != 3 || created != 5 || evicted != 2 {
		t.Errorf("stats: %d live, %d created, %d evicted; want 3, 5, 2", live, created, evicted)
	}
}

// TestSessionPoolDropsAnIdleSession: drop closes k's session when nobody
// holds it (the session a batch-size measurement grew the arena of), never
// a held one, and the next acquire opens a new session.
func TestSessionPoolDropsAnIdleSession(t *testing.T) {
	var live, opened atomic.Int64
	p := newSessionPool(4, func(k sessionKey) (inferSession, error) {
		live.Add(1)
		opened.Add(1)
		return &fakeSession{live: &live}, nil
	})
	defer p.close()
	ctx := context.Background()
	k := sessionKey{model: "m", layer: 3}
	if p.drop(k) {
		t.Fatal("drop of a session never opened reported a close")
	}
	e, err := p.acquire(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if p.drop(k) {
		t.Fatal("drop closed a held session")
	}
	if err := e.s.run(1, nil, nil); err != nil {
		t.Fatalf("the held session after drop: %v", err)
	}
	p.release(e)
	if !p.drop(k) {
		t.Fatal("drop left an idle session open")
	}
	if n := live.Load(); n != 0 {
		t.Fatalf("%d sessions live after drop, want 0", n)
	}
	e, err = p.acquire(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	p.release(e)
	if n := opened.Load(); n != 2 {
		t.Fatalf("%d sessions opened, want 2: the acquire after drop opens a new one", n)
	}
}
