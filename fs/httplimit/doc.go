// Package httplimit bounds what an HTTP listener of featurefs can hold
// (`featurefs serve` and a mount's --metrics-addr), so that connections,
// authenticated or not, can never take the descriptors and memory the
// filesystem needs.
//
// # Connections
//
// A Listener accepts at most MaxConns connections at once (by default a
// share of the process's descriptor limit, RLIMIT_NOFILE, that leaves
// descriptors for the cache, the store and FUSE: ConnBudget) and at most
// MaxConnsPerPeer from one peer (an IPv4 address, or an IPv6 /64). A
// connection beyond either bound makes room by closing the oldest
// connection that is not serving an admitted request (Admit), preferring
// one that never served one; if every connection is serving, the new one
// is closed. So a flood of connections that never authenticate churns
// among themselves and an authorized client still gets in.
//
// # Time
//
// Handler bounds how long a request may take to arrive (headers:
// Timeouts.Header; a body: Timeouts.Body, from the start of the handler
// until the body's end) and how long a client may take to accept each
// 256 KiB of the answer (Timeouts.Write), so that a client that stops
// reading is disconnected and its request's context is cancelled.
package httplimit
