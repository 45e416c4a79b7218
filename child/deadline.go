package child

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"time"
)

// armSlack is how much earlier than a new earliest deadline the timer is
// armed (see deadlines.add).
const armSlack = 10 * time.Millisecond

// deadlines enforces the calls' timeout_ms for the whole server on one
// timer, rather than one timer per call.
//
// A timer the Go runtime adds to an empty timer heap wakes a sleeping
// thread so that it can sleep again until the new timer, and a child
// whose calls are short has an empty heap at almost every invoke: one
// timer per call made every call with a deadline pay that wake-up (the
// bench module's BenchmarkSkulkCall against BenchmarkSkulkCallNoDeadline
// measures what a deadline costs a call: docs/performance.md, "Benchmarks
// of the bench module"). Here the timer is moved
// only when a new deadline comes before the one it is armed for, and never
// when a call ends: calls that keep the same timeout, one after another,
// touch it once per timeout. When it fires, it cancels the calls whose
// deadline passed (cause ErrTimeout) and is armed again for the earliest
// left, if any.
type deadlines struct {
	mu sync.Mutex
	// pending are the deadlines of the calls that have not ended, earliest
	// first. Bounded by the calls the server has in flight: a call adds at
	// most one, and removes it when it ends.
	pending deadlineHeap
	t       *time.Timer    // made on first use; guarded by mu
	armedAt time.Time      // when t fires; zero when it is not armed; guarded by mu
	stopped bool           // guarded by mu
	wg      sync.WaitGroup // runs of fire scheduled or under way (see armLocked); stop waits for them
}

// deadline is one call's place in deadlines.
type deadline struct {
	at  time.Time
	cl  *call
	idx int // in pending; -1 when not there
}

// add makes cl's context cancelled with ErrTimeout at at, unless remove
// comes first. After stop it does nothing (and returns a deadline that
// remove ignores): the server's context has cancelled every call by then.
func (d *deadlines) add(cl *call, at time.Time) *deadline {
	dl := &deadline{at: at, cl: cl, idx: -1}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return dl
	}
	heap.Push(&d.pending, dl)
	if !d.armedAt.IsZero() && !at.Before(d.armedAt) {
		return dl // the timer fires early enough already
	}
	// Armed a little early: calls whose timeout_ms a host derives from
	// one deadline of its own give deadlines a millisecond or so apart,
	// either side of each other, and each that came earlier would move
	// the timer again. An early run finds nothing due and arms the timer
	// for the earliest deadline.
	d.armLocked(at.Add(-armSlack))
	return dl
}

// remove takes dl out, if it has not fired. The timer stays as it is.
func (d *deadlines) remove(dl *deadline) {
	d.mu.Lock()
	if dl.idx >= 0 {
		heap.Remove(&d.pending, dl.idx)
	}
	d.mu.Unlock()
}

// armLocked makes the timer fire at at. d.mu is held.
func (d *deadlines) armLocked(at time.Time) {
	d.armedAt = at
	// wg counts each run of fire that is scheduled, from here until it
	// returns or stop stops it. A Reset that finds the timer still armed
	// replaces that run rather than adding one.
	d.wg.Add(1)
	if d.t == nil {
		d.t = time.AfterFunc(time.Until(at), d.fire)
		return
	}
	if d.t.Reset(time.Until(at)) {
		d.wg.Done()
	}
}

// fire cancels the calls whose deadline passed and arms the timer for the
// earliest of the others. It runs on the timer's goroutine.
func (d *deadlines) fire() {
	defer d.wg.Done()
	d.mu.Lock()
	now := time.Now()
	var due []*call
	for len(d.pending) > 0 && !d.pending[0].at.After(now) {
		due = append(due, heap.Pop(&d.pending).(*deadline).cl)
	}
	d.armedAt = time.Time{}
	if len(d.pending) > 0 && !d.stopped {
		d.armLocked(d.pending[0].at) // exactly: a run before it would find nothing due
	}
	d.mu.Unlock()
	for _, cl := range due {
		cl.cancelWith(ErrTimeout)
	}
}

// stop stops the timer for good and waits for a run of fire under way.
func (d *deadlines) stop() {
	d.mu.Lock()
	d.stopped = true
	if d.t != nil && d.t.Stop() {
		d.wg.Done()
	}
	for _, dl := range d.pending {
		dl.idx = -1
	}
	d.pending = nil
	d.mu.Unlock()
	d.wg.Wait()
}

// deadlineHeap orders deadlines earliest first (container/heap).
type deadlineHeap []*deadline

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h deadlineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *deadlineHeap) Push(x any) {
	dl := x.(*deadline)
	dl.idx = len(*h)
	*h = append(*h, dl)
}
func (h *deadlineHeap) Pop() any {
	old := *h
	dl := old[len(old)-1]
	old[len(old)-1] = nil
	dl.idx = -1
	*h = old[:len(old)-1]
	return dl
}

// deadlineCtx is the handler's context of a call whose invoke has a
// timeout_ms: the call's cancellable context, which reports the deadline,
// and whose Err is context.DeadlineExceeded once the deadline cancelled it
// (context.Cause says ErrTimeout). The server's deadlines cancel it, so it
// needs no timer of its own. Contexts a handler derives from it see the
// deadline too; once it passed they report context.Canceled, with the
// same cause.
type deadlineCtx struct {
	context.Context // the call's context.WithCancelCause
	at              time.Time
}

// Deadline reports the call's deadline.
func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.at, true }

// Err is the call context's Err, but context.DeadlineExceeded when the
// cause is the deadline.
func (c *deadlineCtx) Err() error {
	err := c.Context.Err()
	if err != nil && errors.Is(context.Cause(c.Context), ErrTimeout) {
		return context.DeadlineExceeded
	}
	return err
}
