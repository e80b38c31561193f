package namespace

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/featurefs/featurefs/fs/bucket"
)

// A listing read whole (a lookup's, a refresh's, a directory read ahead of
// a walk) of a prefix larger than two pages, from a store that can start a
// page at any key (Config.ListRanges and ListFanout > 1: S3's StartAfter,
// --list-ranges; off by default, as MinIO walks the prefix from its start
// for each such page), reads the rest
// of the prefix after its second page in key ranges at once rather than
// one continuation token after another: the first page's names tell where
// the names vary and split the key space after it into splitWidth ranges
// of about a page each (splitPoints), the last range, without an end,
// splits again after its own first page, each range is listed page by
// page from its start (bucket.AfterToken) up to the next range's, and the
// pages are taken in key order, so that the listing is the one a
// sequential read gives (TestFanOutListsAsSequential). The cost: about
// twice the requests of the pages (a range's end is seen on a page past
// it), and up to splitWidth empty ranges past the prefix's end.
//
// Bounds: at most ListFanout ranges of one listing are read at once, and
// the range requests of all listings together hold one of ListFanout slots
// each (Namespace.rangeSlots), so that the mount has at most ListFanout
// of them in flight whatever the listings (the mount sets ListFanout at
// most the bucket's GET bound, bucket.DefaultListFanout); a range reads at
// most rangeBuffer pages ahead of the listing taking them (at most
// ListFanout x (rangeBuffer+1) pages held per listing); a listing is split
// into at most maxRanges ranges.
//
// A directory reader streaming a prefix page by page (OpenDir with no
// listing kept) reads its third page on in key ranges too, in the
// background (listStream.background), ahead of the reader by the buffers
// above; at most streamFanOuts readers at once do (the others read on page
// by page), and Close (the kernel's RELEASEDIR) stops it.

// streamFanOuts bounds the directory readers reading key ranges in the
// background.
const streamFanOuts = 4

// maxRanges bounds the key ranges one listing is split into (past it, the
// last range reads on page by page).
const maxRanges = 4096

// splitWidth is how many ranges a split makes (the last range splits
// again after its first page): twice the default ListFanout, so that the
// readers have ranges ahead while the last one's first page comes.
const splitWidth = 16

// rangeBuffer is how many pages a range reads ahead of the listing.
const rangeBuffer = 2

// splitPoints returns the names (relative to the listed prefix) that start
// the key ranges after a page whose names run from first to last: their
// common start up to where they differ, counted on splitWidth times as an
// odometer whose digits are the characters of its last positions (digits,
// lower- or upper-case letters: each counts within its class, carrying to
// the position before), in key order, all after last. E.g. img000000.jpg
// .. img000999.jpg gives img001 .. img016, ranges of about a page each.
// Names that share no start, or whose start ends in another character,
// give none. A range of whole pages costs one request more (its end is
// seen on a page past it), an empty one (past the prefix's end) a request.
func splitPoints(first, last string) []string {
	n := 0
	for n < len(first) && n < len(last) && first[n] == last[n] {
		n++
	}
	c := []byte(last[:n])
	var out []string
	for range splitWidth {
		if !increment(c) {
			break
		}
		out = append(out, string(c))
	}
	return out
}

// increment counts c on by one in its last positions' classes (charClass),
// and reports whether it could (false: a position out of any class, or the
// first position, would have to carry).
func increment(c []byte) bool {
	for j := len(c) - 1; j >= 0; j-- {
		hi := charClass(c[j])
		if hi == 0 {
			return false
		}
		if c[j] < hi {
			c[j]++
			return true
		}
		c[j] = classLow(hi) // carry
	}
	return false
}

// classLow returns the first character of the class that ends at hi.
func classLow(hi byte) byte {
	switch hi {
	case '9':
		return '0'
	case 'z':
		return 'a'
	}
	return 'A'
}

// charClass returns the last character of ch's class (digits, lower-case
// letters, upper-case letters), or 0 for any other character.
func charClass(ch byte) byte {
	switch {
	case ch >= '0' && ch <= '9':
		return '9'
	case ch >= 'a' && ch <= 'z':
		return 'z'
	case ch >= 'A' && ch <= 'Z':
		return 'Z'
	}
	return 0
}

// keyRange is one range of a split listing: the names from token up to
// and including hi ("" for no end: the last range, which splits again
// after its first page while the ranges number fewer than maxRanges).
type keyRange struct {
	token string // where its first page starts: a continuation or AfterToken
	hi    string // the last key it may hold (a full key); "" for none. Set before the range is handed out, or by its reader.
	pages chan rangePage
}

// rangePage is a page of a range, or the error that ended it.
type rangePage struct {
	p     bucket.Page
	last  bool // the range's last page
	final bool // and the listing's
	err   error
}

// fan is one split listing: the ranges in key order, handed to the
// readers (work) and to the taker (order) alike.
type fan struct {
	ns          *Namespace
	prefix      string
	work, order chan *keyRange // capacity maxRanges: never block
	ranges      atomic.Int64   // ranges handed out
}

// split ends r (a range without an end) at the first of the split points
// after seen that first and last (a page's first and last names, relative
// to the prefix) give, and hands out r, if not yet, and the ranges after
// it, the last without an end. It reports whether r was split.
func (f *fan) split(r *keyRange, first, last, seen string, handOut bool) bool {
	splits := slices.DeleteFunc(splitPoints(first, last), func(sp string) bool { return sp <= seen })
	splits = splits[:min(len(splits), maxRanges-int(f.ranges.Load())-1)]
	if len(splits) > 0 {
		r.hi = f.prefix + splits[0]
	}
	if handOut {
		f.handOut(r)
	}
	for i, sp := range splits {
		nr := &keyRange{token: bucket.AfterToken(f.prefix + sp), pages: make(chan rangePage, rangeBuffer)}
		if i+1 < len(splits) {
			nr.hi = f.prefix + splits[i+1]
		}
		f.handOut(nr)
	}
	return len(splits) > 0
}

func (f *fan) handOut(r *keyRange) {
	f.ranges.Add(1)
	f.work <- r
	f.order <- r
}

// fanOut reads the rest of prefix in key ranges from token (after the
// name seen, the last read), split where the first page's names (from
// first to last, relative to the prefix) say, the last range splitting
// again where its own first page says; it takes the pages in key order
// (take), and reads on page by page when the names give no split. It
// returns take's or the store's first error.
func (ns *Namespace) fanOut(ctx context.Context, prefix, token, first, last, seen string, take func(bucket.Page, bool) error) error {
	f := &fan{ns: ns, prefix: prefix, work: make(chan *keyRange, maxRanges), order: make(chan *keyRange, maxRanges)}
	f.split(&keyRange{token: token, pages: make(chan rangePage, rangeBuffer)}, first, last, seen, true)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for range max(1, ns.cfg.ListFanout) {
		wg.Go(func() {
			// Ranges in key order: the range being taken always has a
			// reader (it was handed out before any later one).
			for {
				select {
				case r, ok := <-f.work:
					if !ok || !f.read(ctx, r) {
						return
					}
				case <-ctx.Done():
					return
				}
			}
		})
	}
	for {
		var r *keyRange
		select {
		case r = <-f.order:
		case <-ctx.Done():
			return ctx.Err()
		}
		for done := false; !done; {
			var rp rangePage
			select {
			case rp = <-r.pages:
			case <-ctx.Done():
				return ctx.Err()
			}
			if rp.err != nil {
				return rp.err
			}
			done = rp.last
			if err := take(rp.p, rp.final); err != nil {
				return err
			}
			if rp.final {
				return nil
			}
		}
	}
}

// read lists one key range page by page into r.pages, each request
// holding one of the range slots; a range without an end splits after its
// first page (split). It returns false when ctx ended or the range failed.
func (f *fan) read(ctx context.Context, r *keyRange) bool {
	ns, prefix := f.ns, f.prefix
	send := func(rp rangePage) bool {
		select {
		case r.pages <- rp:
			return true
		case <-ctx.Done():
			return false
		}
	}
	token, first := r.token, true
	for {
		select {
		case ns.rangeSlots <- struct{}{}:
		case <-ctx.Done():
			return false
		}
		lctx, cancel := ns.listCtx(ctx)
		p, err := ns.bucket.List(lctx, prefix, token)
		cancel()
		<-ns.rangeSlots
		ns.counts.listPages.Add(1)
		if err == nil && p.Next != "" && p.Next == token {
			err = fmt.Errorf("the bucket returned the same continuation token twice")
		}
		if err != nil {
			send(rangePage{err: fmt.Errorf("listing %q: %w", prefix, err)})
			return false
		}
		if first && r.hi == "" && p.Next != "" {
			if pf, pl, ok := firstLast(prefix, p); ok {
				f.split(r, pf, pl, pl, false)
			}
		}
		first = false
		past := false
		if r.hi != "" {
			p, past = trimAfter(p, r.hi)
		}
		last := past || p.Next == ""
		final := last && r.hi == ""
		if !send(rangePage{p: p, last: last, final: final}) {
			return false
		}
		if last {
			return true
		}
		token = p.Next
	}
}

// trimAfter drops the entries of p after hi, and reports whether any was.
func trimAfter(p bucket.Page, hi string) (bucket.Page, bool) {
	past := false
	if i := len(p.Objects); i > 0 && p.Objects[i-1].Key > hi {
		p.Objects = p.Objects[:indexAfter(len(p.Objects), func(j int) string { return p.Objects[j].Key }, hi)]
		past = true
	}
	if i := len(p.Prefixes); i > 0 && p.Prefixes[i-1] > hi {
		p.Prefixes = p.Prefixes[:indexAfter(len(p.Prefixes), func(j int) string { return p.Prefixes[j] }, hi)]
		past = true
	}
	if past {
		p.Next = ""
	}
	return p, past
}

// indexAfter returns the index of the first of n sorted names after hi.
func indexAfter(n int, name func(int) string, hi string) int {
	i := 0
	for i < n && name(i) <= hi {
		i++
	}
	return i
}

// firstLast returns the first and last names of a page, relative to
// prefix, in key order.
func firstLast(prefix string, p bucket.Page) (first, last string, ok bool) {
	var names []string
	if len(p.Prefixes) > 0 {
		names = append(names, p.Prefixes[0], p.Prefixes[len(p.Prefixes)-1])
	}
	if len(p.Objects) > 0 {
		names = append(names, p.Objects[0].Key, p.Objects[len(p.Objects)-1].Key)
	}
	if len(names) == 0 {
		return "", "", false
	}
	first, last = slices.Min(names), slices.Max(names)
	return strings.TrimPrefix(first, prefix), strings.TrimPrefix(last, prefix), true
}

// pagesRead returns how many pages the stream's listing has read.
func (s *listStream) pagesRead() int {
	pages, _ := s.l.size()
	return pages
}

// ranges reports whether listings read key ranges at once
// (Config.ListRanges with ListFanout > 1).
func (ns *Namespace) ranges() bool { return ns.cfg.ListRanges && ns.cfg.ListFanout > 1 }
