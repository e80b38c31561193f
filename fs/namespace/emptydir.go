package namespace

import (
	"context"
	"strings"
	"sync"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/naming"
)

// A directory is shown only if it holds an image object or a subdirectory
// (unless Config.ShowEmptyDirs): a prefix with only a folder-marker object
// ("trail/") or only files that are not images would be an empty directory,
// and DatasetFolder fails on a class directory without a file.

// peekEntries is how many entries the first look into a directory asks for.
const peekEntries = 32

// peekPages bounds the listing pages read to find an image in a directory
// full of other files; past it, the directory is shown.
const peekPages = 3

// dirShown reports whether the directory of prefix is shown: its last
// complete listing (whose subdirectories are already filtered) has an
// entry, or, with none known, a look into it finds an image or a
// subdirectory. When the store cannot tell, it is shown.
func (ns *Namespace) dirShown(ctx context.Context, prefix string) bool {
	if ns.cfg.ShowEmptyDirs {
		return true
	}
	if l, ok := ns.listings.Get(prefix); ok {
		if last := l.lastComplete(); last != nil {
			return last.len() > 0
		}
	}
	token := ""
	for i := range peekPages {
		lctx, cancel := ns.listCtx(ctx)
		var p bucket.Page
		var err error
		if i == 0 {
			p, err = bucket.Peek(lctx, ns.bucket, prefix, peekEntries)
		} else {
			p, err = ns.bucket.List(lctx, prefix, token)
		}
		cancel()
		ns.counts.listPages.Add(1)
		if err != nil {
			return true
		}
		if ns.holdsImageOrDir(prefix, p) {
			return true
		}
		if p.Next == "" || p.Next == token {
			return false
		}
		token = p.Next
	}
	return true
}

// holdsImageOrDir reports whether a page of prefix's listing has an image
// object or a subdirectory that can be named.
func (ns *Namespace) holdsImageOrDir(prefix string, p bucket.Page) bool {
	for _, d := range p.Prefixes {
		if naming.ValidName(strings.TrimSuffix(strings.TrimPrefix(d, prefix), "/")) {
			return true
		}
	}
	for _, o := range p.Objects {
		if base, ok := strings.CutPrefix(o.Key, prefix); ok && naming.ValidName(base) {
			if _, image := ns.naming.Split(base); image {
				return true
			}
		}
	}
	return false
}

// shownOnly drops the directories of es that are not shown, looking into
// them in parallel (bounded with the lookups' Stat calls).
func (ns *Namespace) shownOnly(ctx context.Context, es []naming.Entry) []naming.Entry {
	if ns.cfg.ShowEmptyDirs {
		return es
	}
	hidden := make([]bool, len(es))
	var wg sync.WaitGroup
	for i, e := range es {
		if !e.Dir {
			continue
		}
		select {
		case ns.statSem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return es // cannot tell: shown
		}
		wg.Go(func() {
			defer func() { <-ns.statSem }()
			hidden[i] = !ns.dirShown(ctx, e.Sub)
		})
	}
	wg.Wait()
	out := es[:0:0]
	for i, e := range es {
		if !hidden[i] {
			out = append(out, e)
		}
	}
	return out
}
