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
	if g.Join(wait) {
		return false
	}
	<-wait // a Leave hands its slot over
	return true
}

// Join takes a free slot and reports true, or puts the caller in line and
// reports false: a Leave then hands the slot over on wait (the caller's
// own channel of size 1, empty while it is not waiting), unless the
// caller gives up first with Quit. Join and Quit let a caller wait for
// its slot in a select, beside whatever else may end its wait.
func (g *Gate) Join(wait chan struct{}) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.free > 0 && g.head == len(g.queue) {
		g.free--
		return true
	}
	g.queue = append(g.queue, wait)
	return false
}

// Quit takes a caller that Join put in line out of it, and reports
// whether it holds a slot anyway: a Leave handed one over before the
// caller quit (Quit then takes it from wait, so that wait is empty again),
// and the caller must give it back with Leave.
func (g *Gate) Quit(wait chan struct{}) bool {
	g.mu.Lock()
	// The latest to join is the likeliest to quit: look from the back.
	for i := len(g.queue) - 1; i >= g.head; i-- {
		if g.queue[i] == wait {
			copy(g.queue[i:], g.queue[i+1:])
			g.queue[len(g.queue)-1] = nil
			g.queue = g.queue[:len(g.queue)-1]
			if g.head == len(g.queue) {
				g.queue, g.head = g.queue[:0], 0
			}
			g.mu.Unlock()
			return false
		}
	}
	g.mu.Unlock()
	<-wait // out of line already: a Leave took it and hands its slot over
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
