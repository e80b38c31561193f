package lifetime

import "testing"

// A child's goroutines are its parent's too: closing the parent cancels
// and waits for them; closing the child ends only its own; a closed parent
// refuses the child's new goroutines.
func TestChildIsCountedByItsParent(t *testing.T) {
	parent := New()
	child := parent.Child()
	sibling := parent.Child()
	ended := make(chan string, 3)
	started := make(chan struct{}, 3)
	run := func(o *Owner, name string) {
		if !o.Go(func() {
			started <- struct{}{}
			<-o.Context().Done()
			ended <- name
		}) {
			t.Fatalf("%s refused a goroutine while open", name)
		}
	}
	run(child, "child")
	run(sibling, "sibling")
	run(parent, "parent")
	for range 3 {
		<-started
	}
	child.Close()
	if got := <-ended; got != "child" {
		t.Fatalf("closing the child ended %s", got)
	}
	select {
	case got := <-ended:
		t.Fatalf("closing the child ended %s too", got)
	default:
	}
	if child.Go(func() {}) {
		t.Error("a closed child started a goroutine")
	}
	parent.Close() // returns once the sibling's and its own have returned
	if len(ended) != 2 {
		t.Errorf("after the parent's Close, %d goroutines had ended, want 2", len(ended))
	}
	if sibling.Go(func() {}) {
		t.Error("the child of a closed parent started a goroutine")
	}
	sibling.Close()
}

// CloseAfter closes the owner once what it waits for ends; its own
// goroutine is not counted, so Close before then does not wait for it.
func TestCloseAfter(t *testing.T) {
	o := New()
	release, done := make(chan struct{}), make(chan struct{})
	o.CloseAfter(func() {
		<-release
	})
	o.Go(func() { <-o.Context().Done(); close(done) })
	close(release)
	<-done // the counted goroutine ends: the owner was closed
	if o.Go(func() {}) {
		t.Error("the owner started a goroutine after CloseAfter's wait ended")
	}

	o2 := New()
	never := make(chan struct{})
	defer close(never)
	o2.CloseAfter(func() { <-never })
	o2.Close() // returns: CloseAfter's goroutine is not waited for
}
