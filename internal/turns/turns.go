// Package turns lets the goroutines of one process that would all be
// runnable at once take turns instead: a Gate holds a few slots (one per
// processor, typically), and a goroutine that wants one waits in line,
// first come first served, outside the Go scheduler's run queues. The
// host's busy stream readers and the child's streaming flushers use it
// (docs/architecture.md describes both).
package turns

import "sync"

// Gate is a fixed number of slots handed out first come first served.
// A holder gives its slot back with Leave, which hands it to the
// goroutine that has waited longest. Its line holds at most one entry per
// waiting goroutine, so it is bounded by the goroutines that use it.
// Safe for concurrent use; the zero value is not ready (New makes one).
type Gate struct {
	mu    sync.Mutex
	free  int             // slots nobody holds
	queue []chan struct{} // the goroutines waiting, oldest at queue[head]
	head  int
}

// New returns a Gate of slots slots (at least 1).
func New(slots int) *Gate { return &Gate{free: max(slots, 1)} }

// Enter takes a slot, waiting in line while none is free, and reports
// whether it waited. wait is the caller's own channel of size 1, empty
// while the caller is not waiting; the slot is handed over on it.
func (g *Gate) Enter(wait chan struct{}) bool {
	g.mu.Lock()
	if g.free > 0 && g.head == len(g.queue) {
		g.free--
		g.mu.Unlock()
		return false
	}
	g.queue = append(g.queue, wait)
	g.mu.Unlock()
	<-wait // a Leave hands its slot over
	return true
}

// Waiting reports whether a goroutine waits for a slot.
func (g *Gate) Waiting() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.head < len(g.queue)
}

// Leave gives a slot back: to the goroutine waiting longest, if any.
func (g *Gate) Leave() {
	g.mu.Lock()
	if g.head == len(g.queue) {
		g.free++
		g.mu.Unlock()
		return
	}
	w := g.queue[g.head]
	g.queue[g.head] = nil
	g.head++
	if g.head == len(g.queue) {
		g.queue, g.head = g.queue[:0], 0
	} else if g.head >= 64 && g.head*2 >= len(g.queue) {
		n := copy(g.queue, g.queue[g.head:])
		clear(g.queue[n:])
		g.queue, g.head = g.queue[:n], 0
	}
	g.mu.Unlock()
	w <- struct{}{} // never blocks: the waiter's channel is empty while it waits
}
