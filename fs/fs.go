package fs

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/archive"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/figures"
	"github.com/featurefs/featurefs/fs/internal/lifetime"
	"github.com/featurefs/featurefs/fs/mountpoint"
	"github.com/featurefs/featurefs/fs/namespace"
	"github.com/featurefs/featurefs/fs/naming"
	"github.com/featurefs/featurefs/fs/views"
)

// Config is the tree's own settings: what the FUSE tree needs beyond the
// pipeline it reads through (New), which are those of its namespace. The
// settings the tree shares with the read path (logger, clock, MetadataTTL,
// image extensions) are the pipeline's (features.Pipeline.Config).
type Config = namespace.Config

// maxRead is the largest READ request the mount asks the kernel for
// (MountOptions.MaxWrite, which go-fuse also uses for max_read and
// max_pages), and its readahead.
const maxRead = 1 << 20

// FS is a featurefs tree. Create it with New and serve it with Mount.
type FS struct {
	// Constant after New.
	log         *slog.Logger
	clock       func() time.Time // the pipeline's clock
	metadataTTL time.Duration    // the pipeline's MetadataTTL
	models      []*api.Model
	naming      naming.Rule // the namespace's rule (heldDirs finds directories by it)

	// p is the read path: negative cache, in-flight sharing, cache,
	// extraction, prefetch, the figures; its owner (New's caller) closes
	// it.
	p *features.Pipeline
	// ns is what the tree knows of the bucket: listings, lookups, shown
	// directories, versions, recent reads and failed files.
	ns *namespace.Namespace
	// journal is p's journal of errors (recent errors, log-once): the
	// tree's errors are told there too.
	journal *figures.Journal

	stats counters

	// preds and arrays are what predictions/ and arrays/ read through
	// (fs/views); predModels, predictions/<model> of each model, for
	// ModelReplaced.
	preds      *views.Predictions
	arrays     *views.Arrays
	predModels []*gofs.Inode

	kernel kernelCache // keeps the kernel's cached file entries true (kernelcache.go)
	budget budget      // the nodes' part of the metadata budget (budget.go)

	// passthrough is set by Mount when MountOptions.Passthrough asks for
	// it and the kernel offers it (passthrough.go).
	passthrough atomic.Bool
	// ptProbe guards the one check that the kernel takes backing files
	// (canPassthrough); registerBacking replaces it in tests.
	ptProbe         sync.Mutex
	ptProbed        bool
	registerBacking func(fd int) syscall.Errno
	// srv is the mount's server (Mount), for registering backing files.
	srv atomic.Pointer[fuse.Server]

	// owner owns the tree's own goroutines: kernel checks and
	// invalidations; closed by Close.
	owner *lifetime.Owner
}

// counters are the tree's own figures (the pipeline and the namespace
// count the rest; Stats puts them together).
type counters struct {
	lookups, reads, readBytes, opens      atomic.Int64
	ioErrors, invalidations, contentDrops atomic.Int64
	recentReads                           atomic.Int64
	passthroughOpens                      atomic.Int64
	passthroughVerifyNanos                atomic.Int64
	memoryReleases                        atomic.Int64       // idle releases (idlememory.go)
	errors                                figures.ErrorTally // errors answered to readers, by kind
	// readSizes counts feature files' READ requests by size, indexed as
	// figures.ReadSizeBucket.
	readSizes [len(figures.ReadSizeBounds) + 1]atomic.Int64
}

// New checks cfg, fills its defaults and returns the tree over p, the read
// path it lists, stats and reads through. The caller owns p: it closes p
// after the tree (Close leaves p open).
func New(p *features.Pipeline, cfg Config) (*FS, error) {
	if p == nil {
		return nil, errors.New("fs.New: a pipeline is required")
	}
	pc := p.Config()
	f := &FS{
		log:         pc.Logger,
		clock:       pc.Now,
		metadataTTL: pc.MetadataTTL,
		models:      pc.Extractor.Models(),
		naming:      naming.New(pc.ImageExtensions).WithArchives(pc.Archives),
		owner:       lifetime.New(),
		p:           p,
		journal:     p.Journal(),
		budget:      newBudget(),
	}
	if len(f.models) == 0 {
		return nil, errors.New("fs.New: the extractor serves no model")
	}
	seen := map[string]bool{}
	for _, m := range f.models {
		if !naming.ValidName(m.Name) || m.Name == spec.LayersFile || seen[m.Name] {
			return nil, fmt.Errorf("fs.New: model name %q is not a usable directory name", m.Name)
		}
		seen[m.Name] = true
	}
	f.ns = namespace.New(p, cfg, f.listed, f.listingDropped)
	f.preds = views.NewPredictions(f.ns, p, f.owner)
	f.arrays = &views.Arrays{NS: f.ns, Snaps: views.NewSnapshots(f.metadataTTL, f.ns.MetadataBytes()/2, f.clock),
		MaxRows: maxArrayRows, Env: &views.ArrayEnv{Source: p, Owner: f.owner, Fetch: arrayFetch, Ahead: arrayAhead,
			Failed: func(v *features.View, ds *views.Dataset, row views.Row, err error) {
				k := namespace.FileKey{View: v, Key: row.Obj.Key, ETag: row.Obj.ETag}
				f.ns.ReadFailed(k, ds.Prefix+row.Path, 0, int(v.Size), err, time.Now())
			}}}
	if ab, ok := pc.Bucket.(*archive.Bucket); ok {
		// The archive indexes kept in memory count in the metadata
		// budget with the kernel's entries (budget.go).
		ab.CountIndexBytes(func(d int64) { f.ns.AddHeld(d) })
	}
	return f, nil
}

func (f *FS) now() time.Time { return f.clock() }

// Root returns the root node, for fs.Mount or a custom server.
func (f *FS) Root() gofs.InodeEmbedder { return &rootDir{fs: f} }

// MountOptions are the mount-time settings.
type MountOptions struct {
	// FsName is shown as the mount's source in /proc/mounts (the SOURCE).
	FsName string
	// AllowOther lets other users access the mount.
	AllowOther bool
	// DirectMount calls mount(2) directly (needs root) instead of fusermount3.
	DirectMount bool
	// MaxBackground is how many requests the kernel keeps in flight
	// (default 64; go-fuse's own default of 12 throttles parallel readers).
	MaxBackground int
	// Debug logs every FUSE request.
	Debug bool
	// Passthrough answers opens of feature files (an OPEN round trip per
	// open(2), which the mount otherwise avoids) and hands the kernel the
	// cache's file of a feature stored as its plain bytes, so that its
	// reads bypass the mount (FUSE passthrough, passthrough.go). Off where
	// the kernel lacks it or the mount may not register files with it
	// (not root): silently, as if not asked.
	Passthrough bool
}

// Mount mounts the tree read-only on dir and serves it in the background.
// It returns once the kernel answers on dir. Unmount with Server.Unmount.
// The kernel keeps directories' entries and attributes, and names found
// missing, for MetadataTTL; feature files' for far longer (see
// kernelcache.go), since they change only with their object's ETag.
func (f *FS) Mount(dir string, mo MountOptions) (*fuse.Server, error) {
	ttl := f.metadataTTL
	if mo.MaxBackground <= 0 {
		mo.MaxBackground = 64
	}
	opts := &gofs.Options{
		EntryTimeout:    &ttl,
		AttrTimeout:     &ttl,
		NegativeTimeout: &ttl,
		UID:             uint32(syscall.Getuid()),
		GID:             uint32(syscall.Getgid()),
		MountOptions: fuse.MountOptions{
			FsName:           mo.FsName,
			Name:             "featurefs",
			AllowOther:       mo.AllowOther,
			Options:          []string{"ro", "default_permissions"},
			DirectMount:      mo.DirectMount,
			DirectMountFlags: syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV,
			MaxBackground:    mo.MaxBackground,
			// READs of up to maxRead: go-fuse asks for max_pages to match
			// (Linux 4.20 and later; the kernel's max_pages_limit caps it)
			// and sets max_read, so that a feature file of a layer12-sized
			// 800KB is one or two requests, not nine of the default 128KiB:
			// each request costs a round trip and a cache lookup. The
			// buffers go-fuse keeps grow to maxRead per request in flight
			// (MaxBackground bounds them).
			MaxWrite:     maxRead,
			MaxReadAhead: maxRead,
			// Every read answers from memory (fuse.ReadResultData), never
			// from a file descriptor: go-fuse's splice attempt only grew a
			// pipe and wrote the reply's header into it before falling
			// back to writev, each READ, and logged an error for replies
			// of 1MiB (larger than a pipe may grow).
			DisableSplice: true,
			// No extended attributes: GETXATTR and LISTXATTR answer ENOSYS
			// once and the kernel stops asking (ls -l asked two per file:
			// 11.7x a local directory's time for 65,000 entries, 1.1x
			// without). What a file stands for is in .featurefs/failures.
			// With --augment, view files publish their parameters in one
			// (augxattr.go), and every getxattr is a round trip.
			DisableXAttrs: !f.p.Config().Augment.Any(),
			Debug:         mo.Debug,
		},
	}
	f.passthrough.Store(mo.Passthrough)
	srv, err := gofs.Mount(dir, f.Root(), opts)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	f.srv.Store(srv)
	if mo.Passthrough && srv.KernelSettings().Flags64()&fuse.CAP_PASSTHROUGH == 0 {
		f.passthrough.Store(false) // the kernel has no passthrough: files are never opened
		f.log.Debug("featurefs: passthrough off: the kernel does not offer it", slog.String("mountpoint", dir))
	}
	// The kernel gives a FUSE mount the default 128KiB readahead whatever
	// max_readahead the INIT reply asks for: a read(2) of a whole feature
	// file (np.load) would be sent in requests of 128KiB however large
	// max_pages is. Only root may raise it.
	if err := mountpoint.SetReadAhead(dir, maxRead>>10); err != nil {
		f.log.Debug("featurefs: readahead left at the kernel's default", slog.String("mountpoint", dir), slog.Any("err", err))
	}
	f.startKernelChecks()
	f.startTrimmer()
	f.startIdleRelease()
	f.owner.CloseAfter(srv.Wait) // the mount is gone: stop the kernel checks and listings
	return srv, nil
}

// ino derives a stable inode number from a node's kind and path
// (views.Ino).
func ino(kind byte, parts ...string) uint64 { return views.Ino(kind, parts...) }

// maxArrayRows bounds one array view's rows (a directory of more fails
// its array's lookup with EFBIG, logged with its prefix). arrayAhead is
// how many rows an in-order reader of an array has extracted ahead of
// it; arrayFetch, how many rows one read computes at once (the extractor
// batches concurrent requests: both are a few of its batches).
const (
	maxArrayRows = 16 << 20
	arrayAhead   = 64
	arrayFetch   = 16
)

// Close stops every goroutine the tree started and waits for them: the
// namespace's detached listings and the kernel checks (their contexts are
// cancelled; the checks are f.owner's). Mount closes it once the mount is
// gone. The pipeline stays open: its owner (New's caller) closes it after
// the tree, and with it prefetch and the reads' extractions. Safe to call
// more than once.
func (f *FS) Close() error {
	f.ns.Close()
	f.owner.Close()
	return nil
}
