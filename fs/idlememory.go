package fs

import "github.com/featurefs/featurefs/fs/heappace"

// idle is when an idle mount hands back what its last burst of work took
// (heappace.ReleaseWhenIdle); a variable for the tests.
var idle = heappace.DefaultIdle

// activity is a count that grows with every request the tree answers and
// every call the pipeline makes.
func (f *FS) activity() int64 {
	c := &f.stats
	return c.lookups.Load() + c.reads.Load() + c.opens.Load() + f.p.Activity()
}

// startIdleRelease starts the goroutine, the tree's owner's, that returns
// the free memory once the mount has been idle after some work.
func (f *FS) startIdleRelease() {
	done, c := f.owner.Context().Done(), idle
	f.owner.Go(func() {
		heappace.ReleaseWhenIdle(done, c, f.activity, func() { f.stats.memoryReleases.Add(1) })
	})
}
