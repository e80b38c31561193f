//go:build !race

package cache

// raceOn: the race detector is on.
const raceOn = false
