//go:build race

package cache

// raceOn: the race detector is on. It slows the Go codec about 25x (the
// auto policy measures that, and rightly keeps features raw against a
// CPU host's 35 ms model) but not the model it stands in for.
const raceOn = true
