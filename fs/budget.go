package fs

import (
	"context"
	"sync/atomic"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// The metadata budget (--metadata-cache-size, namespace.Config.MetadataBytes)
// covers the namespace's listings and the entries the tree holds for the
// kernel together. go-fuse keeps an Inode for every entry the kernel
// looked up (or was handed by READDIRPLUS) until the kernel sends FORGET,
// which it does only when it drops the entry: with a large bucket the
// kernel's entries, not the listings, are most of the memory. So:
//
//   - every node the tree creates under a layer directory counts nodeBytes
//     in the budget (namespace.Namespace.AddHeld), from go-fuse's OnAdd to
//     its OnForget;
//   - past the budget, the namespace drops the coldest listings (but keeps
//     a quarter of the budget for them), and the tree tells the kernel to
//     drop its entries of feature files in each directory whose listing
//     was dropped (FUSE_NOTIFY_DELETE on the directory, in every layer and
//     alias directory): the kernel then sends FORGET for those no one has
//     open, and go-fuse lets their Inodes go (an open file keeps working;
//     its FORGET comes after its last close). A name is looked
//     up again, from a listing read again, when a reader comes back to it;
//   - when that is not enough (the kernel holds entries of directories
//     whose listing is long gone, or more than the budget in the
//     directories still listed), a sweep drops the kernel's file entries in
//     every directory with no cached listing, and, if the kernel held none
//     there, in every directory; sweeps run at most every sweepEvery, again
//     while the budget is passed and they find entries to drop or FORGETs
//     come in.
//
// The notifications run in the trimmer goroutine only, never in a request
// (the kernel holds a directory's lock during LOOKUP and READDIR in it, and
// FUSE_NOTIFY_DELETE takes it too). Directories' own nodes count but
// are not forgotten (there are few: an image directory holds hundreds or
// thousands of files).

// nodeBytes is what one node the kernel holds costs the process: go-fuse's
// Inode, the node struct and its strings, and the maps that index it. Issue
// 27's measurement of 1,000,000 entries gives 1.05 KiB (1,838 MiB of RSS
// with the kernel's entries, 787 MiB once the kernel dropped them).
const nodeBytes = 1 << 10

// trimEvery is how many new nodes the tree counts between two trims of the
// listings (the trimmer trims them too whenever the budget is passed).
const trimEvery = 256

// forgetQueue bounds the prefixes waiting for their kernel entries to be
// dropped; a prefix finding the queue full is left to the next sweep.
const forgetQueue = 1024

// sweepEvery is the least time between two sweeps.
const sweepEvery = 200 * time.Millisecond

// budget is the tree's part of the metadata budget.
type budget struct {
	nodes     atomic.Int64  // nodes held (OnAdd less OnForget)
	adds      atomic.Int64  // nodes added (OnAdd)
	forgotten atomic.Int64  // kernel entries dropped for the budget
	prefixes  chan string   // prefixes whose listing was dropped: drop the kernel's entries there
	sweep     chan struct{} // capacity 1: a sweep is wanted
}

func newBudget() budget {
	return budget{prefixes: make(chan string, forgetQueue), sweep: make(chan struct{}, 1)}
}

// nodeAdded counts a new node (go-fuse's OnAdd of a prefixDir or
// featureFile) and checks the budget every trimEvery nodes.
func (f *FS) nodeAdded() {
	f.budget.nodes.Add(1)
	f.ns.AddHeld(nodeBytes)
	if f.budget.adds.Add(1)%trimEvery == 0 {
		f.ns.Trim()
	}
	if f.ns.Over() {
		f.wantSweep() // the trimmer trims the listings, then the nodes
	}
}

// nodeForgotten counts a node go-fuse let go (OnForget).
func (f *FS) nodeForgotten() {
	f.budget.nodes.Add(-1)
	f.ns.AddHeld(-nodeBytes)
}

// wantSweep asks the trimmer for a sweep.
func (f *FS) wantSweep() {
	select {
	case f.budget.sweep <- struct{}{}:
	default:
	}
}

// listingDropped is the namespace's callback for a listing dropped for the
// budget: the kernel's entries in its directory are dropped too (queued for
// the trimmer; a sweep when the queue is full).
func (f *FS) listingDropped(prefix string) {
	select {
	case f.budget.prefixes <- prefix:
	default:
		f.wantSweep()
	}
}

// startTrimmer starts the goroutine that drops the kernel's entries for
// the budget, the tree's owner's.
func (f *FS) startTrimmer() {
	done := f.owner.Context().Done()
	f.owner.Go(func() {
		var last time.Time
		lastNodes := int64(-1) // nodes after the last sweep
		for {
			select {
			case p := <-f.budget.prefixes:
				if !f.ns.Cached(p) && f.forgetFiles(f.heldDirs(p)) > 0 && f.over() {
					f.wantSweep()
				}
			case <-f.budget.sweep:
				if wait := sweepEvery - time.Since(last); wait > 0 {
					select {
					case <-time.After(wait):
					case <-done:
						return
					}
				}
				// Another sweep while the budget is passed and this one
				// found entries to drop, or FORGETs of earlier ones came
				// since (they come after the notifications); else the next
				// nodes added ask again.
				nodes := f.budget.nodes.Load()
				n := f.sweepKernel(f.owner.Context())
				if f.over() && (n > 0 || lastNodes < 0 || nodes < lastNodes) {
					f.wantSweep()
				}
				lastNodes = nodes
				last = time.Now()
			case <-done:
				return
			}
		}
	})
}

// over reports whether the listings and the nodes pass the budget.
func (f *FS) over() bool { return f.ns.Over() }

// sweepKernel drops the kernel's file entries in every directory with no
// cached listing, or, when the kernel held none there, in every directory,
// while the budget is passed. It returns how many the kernel held.
func (f *FS) sweepKernel(ctx context.Context) int {
	f.ns.Trim()
	if !f.over() {
		return 0
	}
	f.kernel.mu.Lock()
	layers := f.kernel.layers
	f.kernel.mu.Unlock()
	var cold, all []*gofs.Inode
	var walk func(n *gofs.Inode)
	walk = func(n *gofs.Inode) {
		d, ok := n.Operations().(*prefixDir)
		if !ok {
			return
		}
		files := false
		for _, ch := range n.Children() {
			if _, ok := ch.Operations().(*featureFile); ok {
				files = true
			} else {
				walk(ch)
			}
		}
		if files {
			all = append(all, n)
			if !f.ns.Cached(d.prefix) {
				cold = append(cold, n)
			}
		}
	}
	for _, l := range layers {
		if ctx.Err() != nil {
			return 0
		}
		walk(l)
	}
	if n := f.forgetFiles(cold); n > 0 {
		return n
	}
	return f.forgetFiles(all)
}

// forgetFiles tells the kernel to drop its entries of the feature files in
// dirs; it counts those the kernel held, and returns how many.
func (f *FS) forgetFiles(dirs []*gofs.Inode) int {
	n := 0
	for _, d := range dirs {
		for name, ch := range d.Children() {
			if _, ok := ch.Operations().(*featureFile); !ok {
				continue
			}
			// FUSE_NOTIFY_DELETE, not INVAL_ENTRY: an invalidated entry's
			// inode stays in the kernel's inode cache (no FORGET) until
			// memory pressure reclaims it; a deleted one's is evicted, and
			// forgotten, once no one has it open.
			if d.NotifyDelete(name, ch) == 0 {
				n++
			}
		}
	}
	f.budget.forgotten.Add(int64(n))
	return n
}

// nodesFull reports whether the nodes take their whole share of the budget
// (all but the quarter kept for listings): READDIRPLUS then hands out
// names without creating nodes (dirHandle.Lookup), and a reader that wants
// an entry's attributes looks it up.
func (f *FS) nodesFull() bool {
	return f.budget.nodes.Load()*nodeBytes >= f.ns.NodeShare()
}
