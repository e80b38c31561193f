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
// a walk) of a prefix larger than one page, from a store that can start a
// page at any key (Config.ListFanout > 1: S3's StartAfter), reads the rest
// of the prefix after its first page in key ranges at once rather than one
// continuation token after another: the first page's names tell where the
// names vary (splitPoints), each range is listed page by page from its
// start (bucket.AfterToken) up to the next range's, and the pages are taken
// in key order, so that the listing is the one a sequential read gives.
//
// Bounds: at most ListFanout ranges of one listing are read at once, and
// the range requests of all listings together hold one of ListFanout slots
// each (Namespace.rangeSlots), so that the mount has at most ListFanout
// of them in flight whatever the listings (the mount sets ListFanout at
// most the bucket's GET bound, bucket.DefaultListFanout); a range reads at
// most rangeBuffer pages ahead of the listing taking them; a listing is
// split into at most maxRanges ranges.
//
// A directory reader streaming a prefix page by page (OpenDir with no
// listing kept) reads its third page on in key ranges too, in the
// background (listStream.background), ahead of the reader by the buffers
// above; at most streamFanOuts readers at once do (the others read on page
// by page), and Close (the kernel's RELEASEDIR) stops it.

// streamFanOuts bounds the directory readers reading key ranges in the
// background.
const streamFanOuts = 4

// maxRanges bounds the key ranges one listing is split into.
const maxRanges = 64

// splitLevels is how many name positions above the one where a first
// page's names vary are split (ranges of about one page, ten, a hundred
// for decimal names).
const splitLevels = 3

// rangeBuffer is how many pages a range reads ahead of the listing.
const rangeBuffer = 2

// splitPoints returns the names (relative to the listed prefix) that start
// the key ranges after a first page whose names run from first to last:
// at each of up to splitLevels positions before the first one where they
// differ, while those hold characters of that one's class (digits, lower-
// or upper-case letters), every later character of the class after their
// common start, in key order, all after last. E.g. img000000.jpg ..
// img000999.jpg gives img001 .. img009, img01 .. img09, img1 .. img9: the
// last range (img9 and after) is read page by page. Names that share no
// start give none. A range of whole pages costs one request more (its end
// is seen on a page past it), an empty one a request.
func splitPoints(first, last string) []string {
	n := 0
	for n < len(first) && n < len(last) && first[n] == last[n] {
		n++
	}
	if n == len(last) {
		return nil
	}
	c, class := last[:n], charClass(last[n])
	var out []string
	for j := n - 1; j >= 0 && j >= n-splitLevels && class != 0 && charClass(c[j]) == class; j-- {
		for v := c[j] + 1; v <= class; v++ {
			out = append(out, c[:j]+string(v))
		}
	}
	slices.Sort(out)
	return out[:min(len(out), maxRanges-1)]
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

// keyRange is one range of a split listing: the names after after (or
// from token) up to and including hi ("" for no end).
type keyRange struct {
	token string // where its first page starts: a continuation or AfterToken
	hi    string // the last key it may hold (a full key); "" for none
	pages chan rangePage
}

// rangePage is a page of a range, or the error that ended it.
type rangePage struct {
	p    bucket.Page
	last bool // the range's last page
	err  error
}

// fanOut reads the rest of prefix in key ranges from token (after the
// name seen, the last read), split where the first page's names (from
// first to last, relative to the prefix) say, taking the pages in key order
// (take); it reads on page by page when the names give no split. It
// returns take's or the store's first error.
func (ns *Namespace) fanOut(ctx context.Context, prefix, token, first, last, seen string, take func(bucket.Page, bool) error) error {
	splits := slices.DeleteFunc(splitPoints(first, last), func(sp string) bool { return sp <= seen })
	ranges := make([]*keyRange, len(splits)+1)
	ranges[0] = &keyRange{token: token}
	for i, sp := range splits {
		ranges[i].hi = prefix + sp
		ranges[i+1] = &keyRange{token: bucket.AfterToken(prefix + sp)}
	}
	for _, r := range ranges {
		r.pages = make(chan rangePage, rangeBuffer)
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	var nextRange atomic.Int64
	for range min(ns.cfg.ListFanout, len(ranges)) {
		wg.Go(func() {
			// Ranges in key order: the range being taken always has a
			// worker (it was handed out before any later one).
			for i := int(nextRange.Add(1) - 1); i < len(ranges); i = int(nextRange.Add(1) - 1) {
				if !ns.readRange(ctx, prefix, ranges[i]) {
					return
				}
			}
		})
	}
	for i, r := range ranges {
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
			if err := take(rp.p, done && i == len(ranges)-1); err != nil {
				return err
			}
		}
	}
	return nil
}

// readRange lists one key range page by page into r.pages, each request
// holding one of the range slots; it returns false when ctx ended.
func (ns *Namespace) readRange(ctx context.Context, prefix string, r *keyRange) bool {
	send := func(rp rangePage) bool {
		select {
		case r.pages <- rp:
			return true
		case <-ctx.Done():
			return false
		}
	}
	token := r.token
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
		past := false
		if r.hi != "" {
			p, past = trimAfter(p, r.hi)
		}
		last := past || p.Next == ""
		if !send(rangePage{p: p, last: last}) {
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
