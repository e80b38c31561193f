package fs

import (
	"context"
	"strings"
	"sync"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/featurefs/featurefs/fs/namespace"
	"github.com/featurefs/featurefs/fs/views"
)

// What the kernel caches of a feature file, and how it is kept true.
//
// A feature file's inode number is derived from its object's key and ETag
// (views.Layer.FileIno), and everything the kernel caches of that inode is
// fixed by them: its size (the layer's shape), its mtime (the object's) and
// its content (the feature of that object version, opened with
// FOPEN_KEEP_CACHE). What can change is which inode a name stands for: an
// object deleted, overwritten, or renamed by the naming rule because a
// sibling appeared. So the kernel keeps feature files' entries and
// attributes for fileTimeout, far longer than MetadataTTL, and is told to
// drop an entry (FUSE_NOTIFY_INVAL_ENTRY) when a listing of its directory
// read from the store no longer agrees with the node it stands for:
//
//   - every complete listing read from the store is checked against the
//     feature files the kernel holds in that directory, in every model's
//     layer and alias directory (checkKernel), in the background;
//   - a directory's own entry keeps MetadataTTL: when the kernel looks a
//     directory up again (a path walk through it after the TTL), and it
//     holds feature files in it, the lookup first reads the directory's
//     listing again if it is stale (waiting up to StaleGrace, as every
//     stale lookup does) and waits, up to kernelCheckWait, for that listing
//     to be checked. A path walk through a directory therefore sees
//     deletions and overwrites as soon as it did when file entries expired
//     after MetadataTTL;
//   - the pages of a file are the one thing the kernel serves without
//     asking (files are never opened: noOpen). When a complete listing is
//     read from the store, before anything uses it, the kernel is told to
//     drop the pages of every feature file it holds in that directory
//     whose object the listing shows changed or gone (dropChangedPages:
//     FUSE_NOTIFY_INVAL_INODE needs no directory lock, so it runs in the
//     request that read the listing). The reads that then come answer
//     from the listing (featureFile.Read): a name the fresh listing lacks
//     is ENOENT even before the kernel has dropped its entry. A node older
//     than the version the mount knows of keeps serving its own version's
//     bytes while the cache holds them, since a reader part way through
//     the file has read some of them already (serving the new version's
//     from the middle of a read(2) sequence mixed two versions in one
//     file: TestReaderAcrossARelistingReadsOneVersion); the name reads the
//     new version once the kernel has dropped the entry. Only a node whose
//     own version's feature has left the cache serves the new version.
//
// Notifications are never sent while handling a request on the directory
// whose entries they drop (the kernel holds that directory's lock during
// READDIR and LOOKUP in it; FUSE_NOTIFY_INVAL_ENTRY takes it too): the
// checks run in their own goroutines, and a lookup of a directory D (which
// holds the lock of D's parent, not D's) only waits for the check of D's
// entries, with a bound.
//
// A directory too large to list within RelistPages pages whose listing is
// not cached has nothing to be checked against: a lookup of it drops the
// kernel's file entries in it, so that each name is looked up again (and
// found, or not, by the Stat calls lookups make without a listing).
//
// Left out: a path relative to a working directory inside D does not walk
// through D's entry, so it sees a change when anything reads D's listing
// again (ls, a lookup of a name not cached, a path walk through D), at most
// fileTimeout later.

// minFileTimeout is the shortest kernel entry and attribute timeout of a
// feature file when MetadataTTL is not 0.
const minFileTimeout = 24 * time.Hour

// kernelCheckWait bounds how long a lookup of a directory waits for the
// kernel's entries in it to be checked against a new listing.
const kernelCheckWait = time.Second

// kernelCheckers is how many goroutines check new listings against the
// kernel's entries; kernelCheckQueue bounds the listings waiting for them
// (a listing that finds the queue full is checked when its directory is
// next looked up).
const (
	kernelCheckers   = 2
	kernelCheckQueue = 1024
)

// kernelCache is what the FS needs to keep the kernel's cache true.
// Its checker goroutines are the tree's owner's: they stop when the tree
// closes (the mount is gone: Mount's CloseAfter, or Close).
type kernelCache struct {
	mu     sync.Mutex
	layers []*gofs.Inode           // GUARDED_BY(mu): every layer and alias directory of every model
	preds  []predRoot              // GUARDED_BY(mu): predictions/<model> of every model
	queue  chan *namespace.Listing // GUARDED_BY(mu): listings to check; nil unless mounted
}

// fileTimeout is the kernel entry and attribute timeout of feature files:
// none when MetadataTTL is 0 (nothing is cached), else the longer of
// MetadataTTL and minFileTimeout.
func (f *FS) fileTimeout() time.Duration {
	if f.metadataTTL <= 0 {
		return 0
	}
	return max(f.metadataTTL, minFileTimeout)
}

// addLayerDir records a layer or alias directory's inode (modelDir.OnAdd).
func (f *FS) addLayerDir(n *gofs.Inode) {
	f.kernel.mu.Lock()
	defer f.kernel.mu.Unlock()
	f.kernel.layers = append(f.kernel.layers, n)
}

// addPredModelDir records predictions/<model>'s inode (rootDir.OnAdd), for
// ModelReplaced.
func (f *FS) addPredModelDir(pm *views.PredModel, n *gofs.Inode) {
	f.kernel.mu.Lock()
	defer f.kernel.mu.Unlock()
	f.kernel.preds = append(f.kernel.preds, predRoot{pm, n})
}

// predRoot is predictions/<model>: its views and its inode.
type predRoot struct {
	pm   *views.PredModel
	node *gofs.Inode
}

// startKernelChecks starts the checker goroutines, the tree's owner's:
// Close (once the mount is gone) stops them.
func (f *FS) startKernelChecks() {
	k := &f.kernel
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.queue != nil {
		return
	}
	queue, done := make(chan *namespace.Listing, kernelCheckQueue), f.owner.Context().Done()
	k.queue = queue
	for range kernelCheckers {
		f.owner.Go(func() {
			for {
				select {
				case l := <-queue:
					f.checkKernel(l)
				case <-done:
					return
				}
			}
		})
	}
}

// listed drops the pages of the files a listing just read completely from
// the store shows changed (dropChangedPages), then queues it for
// checkKernel. Without a mount, or with the queue full, it does not queue
// it: a lookup of the directory checks it.
func (f *FS) listed(l *namespace.Listing) {
	f.dropChangedPages(l)
	k := &f.kernel
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.queue == nil || f.owner.Context().Err() != nil {
		return
	}
	select {
	case k.queue <- l:
	default:
	}
}

// heldDirs returns the inodes of prefix's directory that the kernel has
// looked up and that hold feature files, in every layer and alias directory.
// Each component is found by the names the naming rule can show it under
// (childDir): an archive's directory (NAME.tar/ shown as NAME) is found as
// a plain prefix's is, so that a listing of a replaced archive's directory
// drops the kernel's entries and pages of its old members (before, no
// archive directory was ever found, and the old member's feature kept
// being served from the kernel's page cache).
func (f *FS) heldDirs(prefix string) []*gofs.Inode {
	f.kernel.mu.Lock()
	layers := f.kernel.layers
	f.kernel.mu.Unlock()
	var parts []string
	if prefix != "" {
		parts = strings.Split(strings.TrimSuffix(prefix, "/"), "/")
	}
	var out []*gofs.Inode
	for _, n := range layers {
		sub := ""
		for _, p := range parts {
			sub += p + "/"
			if n = f.childDir(n, p, sub); n == nil {
				break
			}
		}
		if n == nil {
			continue
		}
		if d, ok := n.Operations().(*prefixDir); ok && d.prefix == prefix && holdsFiles(n) {
			out = append(out, n)
		}
	}
	return out
}

// childDir returns the subdirectory of directory n for bucket prefix sub,
// whose last component is comp, if the kernel holds it: found by the names
// the naming rule can give it (an archive NAME.tar is shown as NAME,
// naming.Rule.DirNames), and checked by its prefix.
func (f *FS) childDir(n *gofs.Inode, comp, sub string) *gofs.Inode {
	for _, name := range f.naming.DirNames(comp) {
		if ch := n.GetChild(name); ch != nil {
			if d, ok := ch.Operations().(*prefixDir); ok && d.prefix == sub {
				return ch
			}
		}
	}
	return nil
}

// holdsFiles reports whether a directory inode has feature file children.
func holdsFiles(d *gofs.Inode) bool {
	for _, ch := range d.Children() {
		if _, ok := ch.Operations().(*featureFile); ok {
			return true
		}
	}
	return false
}

// checkKernel tells the kernel to drop every entry of l's directory, in
// every layer and alias directory, whose feature file is not the one l
// gives that name (same object key and ETag). It runs once per listing;
// l.checked is closed when it is done.
func (f *FS) checkKernel(l *namespace.Listing) {
	l.CheckOnce(func() {
		f.eachStaleFile(l, func(d *gofs.Inode, name string, _ *gofs.Inode) {
			// ENOENT: the kernel no longer had it; nothing to drop.
			d.NotifyEntry(name)
			f.stats.invalidations.Add(1)
		})
	})
}

// eachStaleFile calls fn with every feature file the kernel holds in l's
// directory, in every layer and alias directory, that is not the one l
// gives that name (same object key and ETag): its directory, name and
// inode.
func (f *FS) eachStaleFile(l *namespace.Listing, fn func(dir *gofs.Inode, name string, file *gofs.Inode)) {
	for _, d := range f.heldDirs(l.Prefix()) {
		for name, ch := range d.Children() {
			ff, ok := ch.Operations().(*featureFile)
			if !ok {
				continue
			}
			if e, found, _ := l.Find(name); found && !e.Dir && e.Obj.Key == ff.obj.Key && e.Obj.ETag == ff.obj.ETag {
				continue
			}
			fn(d, name, ch)
		}
	}
}

// dropChangedPages tells the kernel to drop the pages of every feature file
// it holds in l's directory, in every layer and alias directory, that is
// not the one l gives that name (same object key and ETag). The kernel
// waits for the pages a read of such a file is filling, so a read in
// flight of one of them delays it.
func (f *FS) dropChangedPages(l *namespace.Listing) {
	f.eachStaleFile(l, func(_ *gofs.Inode, _ string, file *gofs.Inode) {
		if file.NotifyContent(0, 0) == 0 {
			f.stats.contentDrops.Add(1)
		}
	})
}

// revalidateDir is called by a lookup that found prefix's directory (the
// kernel walking a path through it): if the kernel holds feature files in
// it, their entries are made to agree with a complete listing no older than
// MetadataTTL, read again now if it is stale (all of it, or RelistPages
// pages if no complete listing is cached, waiting up to StaleGrace as stale
// lookups do), before the lookup answers (up to kernelCheckWait). When the
// store answers but no complete listing comes of it (a directory larger
// than RelistPages pages whose listing is not cached), the entries are
// dropped instead, so that the kernel looks each name up again, as it did
// when file entries lived MetadataTTL. When the store does not answer in
// time, the entries stay (an outage serves what the mount knew). It never
// asks the store when the kernel holds no file there.
func (f *FS) revalidateDir(ctx context.Context, prefix string) {
	if f.fileTimeout() == 0 || len(f.heldDirs(prefix)) == 0 {
		return
	}
	l := f.ns.Revalidate(ctx, prefix)
	if l == nil {
		return // the store did not answer in time: the entries stay
	}
	if !l.Complete() {
		f.await(ctx, f.dropFiles(prefix))
		return
	}
	select {
	case <-l.Checked():
		return
	default:
	}
	if !f.owner.Go(func() { f.checkKernel(l) }) { // returns at once if a checker is on it
		return // closed
	}
	f.await(ctx, l.Checked())
}

// await waits for done, at most kernelCheckWait.
func (f *FS) await(ctx context.Context, done <-chan struct{}) {
	t := time.NewTimer(kernelCheckWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
}

// dropFiles tells the kernel, in its own goroutine, to drop every feature
// file entry it holds in prefix's directory; the channel is closed when
// that is done.
func (f *FS) dropFiles(prefix string) <-chan struct{} {
	done := make(chan struct{})
	if !f.owner.Go(func() {
		defer close(done)
		for _, d := range f.heldDirs(prefix) {
			for name, ch := range d.Children() {
				if _, ok := ch.Operations().(*featureFile); ok {
					d.NotifyEntry(name)
					f.stats.invalidations.Add(1)
				}
			}
		}
	}) {
		close(done) // closed: nothing to drop
	}
	return done
}
