package httplimit

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Config says how many connections a Listener holds.
type Config struct {
	// MaxConns bounds the connections held at once (<= 0: DefaultMaxConns
	// clamped by ConnBudget).
	MaxConns int
	// MaxConnsPerPeer bounds the connections of one peer (an IPv4
	// address, an IPv6 /64; <= 0: DefaultMaxConnsPerPeer, and never more
	// than MaxConns).
	MaxConnsPerPeer int
	// Name names the listener in logs ("serve", "metrics").
	Name string
	// Logger receives one line when connections are first shed, then at
	// most one summary per LogEvery; nil discards.
	Logger *slog.Logger
}

const (
	// DefaultMaxConns is the connection bound of a Listener whose Config
	// gives none, before ConnBudget clamps it.
	DefaultMaxConns = 4096
	// DefaultMaxConnsPerPeer is the per-peer bound of a Listener whose
	// Config gives none.
	DefaultMaxConnsPerPeer = 128
	// ReservedDescriptors is the least number of descriptors ConnBudget
	// leaves to the rest of the process (the cache's files, the store's
	// connections, FUSE, the models); it leaves a quarter of the limit
	// when that is more.
	ReservedDescriptors = 512
	// LogEvery is the least interval between two log lines about shed
	// connections.
	LogEvery = 10 * time.Second
)

// ConnBudget returns how many connections a listener may hold, at most
// want: the process's descriptor limit (RLIMIT_NOFILE, as the Go runtime
// raised it) less max(ReservedDescriptors, a quarter of it), and at least
// half the limit. nofile is the limit read (0 if it could not be).
func ConnBudget(want int) (n int, nofile uint64) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 || rl.Cur > 1<<30 {
		return want, 0
	}
	limit := int(rl.Cur)
	avail := limit - max(ReservedDescriptors, limit/4)
	avail = max(avail, limit/2, 1)
	return min(want, avail), rl.Cur
}

// Stats are a Listener's figures.
type Stats struct {
	// Open is the number of connections held now.
	Open int `json:"open"`
	// Accepted counts connections accepted and kept.
	Accepted int64 `json:"accepted"`
	// Evicted counts connections closed to make room for a newer one.
	Evicted int64 `json:"evicted"`
	// Refused counts connections closed at once because every connection
	// in their way was serving an admitted request.
	Refused int64 `json:"refused"`
	// MaxConns and MaxConnsPerPeer are the bounds in force.
	MaxConns        int `json:"max_conns"`
	MaxConnsPerPeer int `json:"max_conns_per_peer"`
}

// Listener is a net.Listener that holds at most MaxConns connections, at
// most MaxConnsPerPeer per peer (package doc). Give its ConnContext to the
// http.Server that serves it, so that Admit finds a request's connection.
type Listener struct {
	net.Listener
	max, perPeer int
	name         string
	log          *slog.Logger

	mu      sync.Mutex
	conns   []*Conn        // GUARDED_BY(mu): open, oldest first
	peers   map[string]int // GUARDED_BY(mu)
	seq     uint64         // GUARDED_BY(mu)
	lastLog time.Time      // GUARDED_BY(mu)
	logged  [2]int64       // GUARDED_BY(mu): evicted, refused at lastLog

	accepted, evicted, refused atomic.Int64
}

// Wrap bounds ln's connections by cfg.
func Wrap(ln net.Listener, cfg Config) *Listener {
	if cfg.MaxConns <= 0 {
		cfg.MaxConns, _ = ConnBudget(DefaultMaxConns)
	}
	if cfg.MaxConnsPerPeer <= 0 {
		cfg.MaxConnsPerPeer = DefaultMaxConnsPerPeer
	}
	cfg.MaxConnsPerPeer = min(cfg.MaxConnsPerPeer, cfg.MaxConns)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Listener{Listener: ln, max: cfg.MaxConns, perPeer: cfg.MaxConnsPerPeer, name: cfg.Name,
		log: cfg.Logger, peers: map[string]int{}}
}

// Stats returns the listener's figures.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	open := len(l.conns)
	l.mu.Unlock()
	return Stats{Open: open, Accepted: l.accepted.Load(), Evicted: l.evicted.Load(), Refused: l.refused.Load(),
		MaxConns: l.max, MaxConnsPerPeer: l.perPeer}
}

// peerOf is the key a connection's peer is counted under: its IPv4
// address, or the /64 of its IPv6 address.
func peerOf(addr net.Addr) string {
	var ip net.IP
	switch a := addr.(type) {
	case *net.TCPAddr:
		ip = a.IP
	default:
		host, _, err := net.SplitHostPort(addr.String())
		if err != nil {
			return addr.String()
		}
		ip = net.ParseIP(host)
		if ip == nil {
			return host
		}
	}
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// Accept waits for a connection and returns it once there is room for it
// (package doc); connections that find none are closed here.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c := &Conn{Conn: nc, l: l, peer: peerOf(nc.RemoteAddr())}
		victim, ok := l.admit(c)
		if victim != nil {
			victim.Conn.Close() // its server goroutine sees the error and ends
		}
		if !ok {
			nc.Close()
			continue
		}
		return c, nil
	}
}

// admit adds c if there is room or room can be made, returning the
// connection to close for it.
func (l *Listener) admit(c *Conn) (victim *Conn, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	defer l.maybeLog()
	switch {
	case l.peers[c.peer] >= l.perPeer:
		victim = l.oldestIdle(c.peer)
	case len(l.conns) >= l.max:
		victim = l.oldestIdle("")
	}
	full := l.peers[c.peer] >= l.perPeer || len(l.conns) >= l.max
	if full && victim == nil {
		l.refused.Add(1)
		return nil, false
	}
	if victim != nil {
		l.removeLocked(victim)
		l.evicted.Add(1)
	}
	l.seq++
	c.seq = l.seq
	l.conns = append(l.conns, c)
	l.peers[c.peer]++
	l.accepted.Add(1)
	return victim, true
}

// oldestIdle returns the oldest connection (of peer, if not empty) that
// is not serving an admitted request, preferring one that never served
// one; nil if there is none.
func (l *Listener) oldestIdle(peer string) *Conn {
	var trusted *Conn
	for _, c := range l.conns {
		if (peer != "" && c.peer != peer) || c.busy.Load() > 0 {
			continue
		}
		if !c.trusted.Load() {
			return c
		}
		if trusted == nil {
			trusted = c
		}
	}
	return trusted
}

// removeLocked forgets c (once).
func (l *Listener) removeLocked(c *Conn) {
	if c.gone {
		return
	}
	c.gone = true
	for i, o := range l.conns {
		if o == c {
			l.conns = append(l.conns[:i], l.conns[i+1:]...)
			break
		}
	}
	if l.peers[c.peer]--; l.peers[c.peer] <= 0 {
		delete(l.peers, c.peer)
	}
}

// maybeLog logs connections shed since the last line, at most once per
// LogEvery.
func (l *Listener) maybeLog() {
	ev, rf := l.evicted.Load(), l.refused.Load()
	if ev == l.logged[0] && rf == l.logged[1] {
		return
	}
	if !l.lastLog.IsZero() && time.Since(l.lastLog) < LogEvery {
		return
	}
	l.log.Warn("featurefs: connection bound reached: closing idle connections",
		slog.String("listener", l.name), slog.Int("open", len(l.conns)),
		slog.Int("max_conns", l.max), slog.Int("max_conns_per_peer", l.perPeer),
		slog.Int64("evicted", ev-l.logged[0]), slog.Int64("refused", rf-l.logged[1]))
	l.lastLog = time.Now()
	l.logged = [2]int64{ev, rf}
}

// Conn is a connection of a Listener.
type Conn struct {
	net.Conn
	l    *Listener
	peer string
	seq  uint64 // GUARDED_BY(l.mu)
	gone bool   // GUARDED_BY(l.mu)

	trusted atomic.Bool  // it served an admitted request
	busy    atomic.Int32 // admitted requests being served
}

// Close closes the connection and frees its place.
func (c *Conn) Close() error {
	c.l.mu.Lock()
	c.l.removeLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

type connKey struct{}

// ConnContext is for http.Server.ConnContext: it lets Admit find the
// connection of a request.
func (l *Listener) ConnContext(ctx context.Context, nc net.Conn) context.Context {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	if c, ok := nc.(*Conn); ok {
		return context.WithValue(ctx, connKey{}, c)
	}
	return ctx
}

// Admit marks the connection of r as serving an admitted (authorized)
// request until release is called: it is not closed to make room for
// others meanwhile, and is kept before connections that never served one
// afterwards. A request not from a Listener's connection is ignored.
func Admit(r *http.Request) (release func()) {
	c, ok := r.Context().Value(connKey{}).(*Conn)
	if !ok {
		return func() {}
	}
	c.trusted.Store(true)
	c.busy.Add(1)
	var once sync.Once
	return func() { once.Do(func() { c.busy.Add(-1) }) }
}
