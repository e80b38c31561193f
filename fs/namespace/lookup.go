package namespace

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/naming"
)

// Lookup answers a lookup of name under prefix, within ReadTimeout as
// a whole:
//   - from a fresh listing that has the name or is complete;
//   - for a stale listing that was complete, from the listing read again
//     if the store answers within StaleGrace, else from the stale listing
//     when it has the name (the new one is read in the background); a
//     name it lacks is asked of the store by Stat calls, as the bucket
//     may have changed since (it answers "missing" only while the store
//     is down: its last call failed);
//   - without a listing to fall back on, from a listing read now (shared by
//     concurrent lookups, at most RelistPages pages), else by Stat calls;
//     by Stat calls alone while the cached listings fill their share of
//     the metadata budget (listingCache.Crowded).
//
// A name is missing only if a complete listing lacks it or Stat says so.
func (ns *Namespace) Lookup(ctx context.Context, prefix, name string) (naming.Entry, error) {
	if !naming.ValidName(name) {
		return naming.Entry{}, fmt.Errorf("%q: %w", name, bucket.ErrNotFound)
	}
	ctx, cancel := ns.listCtx(ctx)
	defer cancel()
	l, ok := ns.listings.Get(prefix)
	var last *Listing // the last complete listing, if any
	if ok {
		last = l.lastComplete()
	}
	switch {
	case ok && ns.fresh(l):
		if e, found, complete := l.find(name); found || complete {
			return ns.answer(prefix, name, e, found)
		}
		// Fresh but incomplete: being read page by page, or too large to
		// keep whole. A name the last complete listing had is still there
		// most likely; any other is asked of the store, unless the store is
		// failing: then the last complete listing answers.
		if last != nil {
			if e, found, _ := last.find(name); found || ns.p.Health().Failing() {
				return ns.answer(prefix, name, e, found)
			}
		}
		return ns.statLookup(ctx, prefix, name)
	case last != nil:
		if nl := ns.refreshStale(ctx, prefix); nl != nil {
			if e, found, complete := nl.find(name); found || complete {
				return ns.answer(prefix, name, e, found)
			}
		}
		e, found, _ := last.find(name)
		if found || ns.p.Health().Down() {
			return ns.answer(prefix, name, e, found)
		}
		// Not in the stale listing and the new one is late (the store is
		// slow, not down): the name may be new, and an ENOENT would be kept
		// by the kernel for another MetadataTTL.
		return ns.statLookup(ctx, prefix, name)
	}
	if ns.listings.Crowded() {
		// The budget is full of other listings: reading this directory
		// for one name would cost up to RelistPages pages (a local
		// directory's every entry: a stat each) and evict another
		// listing, which the next name in it reads again. A dataset
		// larger than the budget sampled at random did that on every
		// read (10,000,000 entries: 34 samples/s against 318 at
		// 1,000,000, docs/records/scale.md); Stat calls for the one name
		// cost what the name costs.
		ns.counts.crowdedLookups.Add(1)
		return ns.statLookup(ctx, prefix, name)
	}
	l, err := ns.lists.Do(ctx, prefix, ns.relist(prefix, ns.cfg.RelistPages))
	if err != nil {
		return naming.Entry{}, err
	}
	if e, found, complete := l.find(name); found || complete {
		return ns.answer(prefix, name, e, found)
	}
	return ns.statLookup(ctx, prefix, name)
}

// answer is a lookup's result from a listing that has the name or is
// complete.
func (ns *Namespace) answer(prefix, name string, e naming.Entry, found bool) (naming.Entry, error) {
	if !found {
		return naming.Entry{}, fmt.Errorf("%s%s: %w", prefix, name, bucket.ErrNotFound)
	}
	return e, nil
}

// statLookup answers a lookup without a complete listing: it Stats the
// keys and lists the prefixes that decide what name stands for (naming's
// probeFor) and applies the rule to what exists, as a listing would. A
// shortened name cannot be reversed: it is looked up in a complete listing.
func (ns *Namespace) statLookup(ctx context.Context, prefix, name string) (naming.Entry, error) {
	ns.counts.statLookups.Add(1)
	p, ok := ns.naming.Probe(prefix, name)
	if !ok {
		return ns.fullListingLookup(ctx, prefix, name)
	}
	objs, dirs, archives, err := ns.probe(ctx, p)
	if err != nil {
		return naming.Entry{}, err
	}
	if e, ok := ns.naming.Resolve(prefix, name, objs, dirs, archives, ns.logRename); ok && (!e.Dir || ns.dirShown(ctx, e.Sub)) {
		return e, nil
	}
	return naming.Entry{}, fmt.Errorf("%s%s: %w", prefix, name, bucket.ErrNotFound)
}

// fullListingLookup finds name in a complete listing of prefix: the cached
// one if fresh, else one read to the end now (shared by concurrent
// lookups; the caller stops waiting when ctx ends).
func (ns *Namespace) fullListingLookup(ctx context.Context, prefix, name string) (naming.Entry, error) {
	l, err := ns.lists.Do(ctx, "\x00complete\x00"+prefix, func(ctx context.Context) (*Listing, error) {
		if l, ok := ns.listings.Get(prefix); ok && ns.fresh(l) {
			if _, complete := l.snapshot(); complete {
				return l, nil
			}
		}
		s := ns.newListStream(prefix)
		if _, err := s.all(ctx, 0); err != nil {
			return nil, err
		}
		return s.l, nil
	})
	if err != nil {
		return naming.Entry{}, err
	}
	if e, found, _ := l.find(name); found {
		return e, nil
	}
	return naming.Entry{}, fmt.Errorf("%s%s: %w", prefix, name, bucket.ErrNotFound)
}

// probe Stats p.keys and lists p.dirs in parallel (bounded for all lookups
// together); it returns the objects that exist, the prefixes that hold
// anything and those of them that are archives' directories (their
// listing says so: bucket.Page.Archives). Any error other than not-found fails the lookup: a missing
// answer is not a negative one.
func (ns *Namespace) probe(ctx context.Context, p naming.Probe) (objs []bucket.Object, dirs, archives []string, err error) {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		done = map[string]bool{}
	)
	run := func(k string, fn func(ctx context.Context) error) bool {
		if done[k] {
			return true
		}
		done[k] = true
		select {
		case ns.statSem <- struct{}{}:
		case <-ctx.Done():
			return false
		}
		wg.Go(func() {
			defer func() { <-ns.statSem }()
			sctx, cancel := ns.listCtx(ctx)
			defer cancel()
			if err := fn(sctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
		return true
	}
	for _, k := range p.Keys {
		ok := run(k, func(ctx context.Context) error {
			o, err := ns.bucket.Stat(ctx, k)
			ns.counts.stats.Add(1)
			switch {
			case errors.Is(err, bucket.ErrNotFound):
				return nil
			case err != nil:
				return fmt.Errorf("stat %q: %w", k, err)
			}
			if o.Key == "" {
				o.Key = k
			}
			mu.Lock()
			objs = append(objs, o)
			mu.Unlock()
			return nil
		})
		if !ok {
			wg.Wait()
			return nil, nil, nil, ctx.Err()
		}
	}
	for _, d := range p.Dirs {
		ok := run(d, func(ctx context.Context) error {
			pg, err := ns.bucket.List(ctx, d, "")
			ns.counts.listPages.Add(1)
			switch {
			case errors.Is(err, bucket.ErrNotFound):
				return nil
			case err != nil:
				return fmt.Errorf("listing %q: %w", d, err)
			}
			if len(pg.Prefixes)+len(pg.Objects) > 0 {
				mu.Lock()
				dirs = append(dirs, d)
				if slices.Contains(pg.Archives, d) {
					archives = append(archives, d)
				}
				mu.Unlock()
			}
			return nil
		})
		if !ok {
			wg.Wait()
			return nil, nil, nil, ctx.Err()
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, nil, nil, errors.Join(errs...)
	}
	return objs, dirs, archives, nil
}
