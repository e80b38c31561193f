//go:build !race

package codec

// raceOn: the race detector is on.
const raceOn = false
