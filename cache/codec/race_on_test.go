//go:build race

package codec

// raceOn: the race detector is on (sync.Pool then drops some of what it is
// given, on purpose, so pooled buffers are allocated again).
const raceOn = true
