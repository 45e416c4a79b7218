package coalesce

import (
	"sync"
	"time"
)

// gateAfter is how many bytes a gated Writer's flusher writes before its
// writes take turns through the Gate: a reply, a pong or the first frames
// of a call never wait for a turn; a stream does once it has moved a
// queue's worth (maxPending) since it started (NewStream) or last paused
// for gateIdle.
const gateAfter = maxPending

// gateIdle is how long a gated Writer's flusher must have had nothing to
// write for its stream to start anew (ungated until gateAfter again). It
// is long on purpose: on a loaded machine a stream written flat out has
// gaps of milliseconds (its sender waits for a processor), and with a
// short gap it never took turns at all; a stream that pauses for a second
// is not one that keeps a processor busy.
const gateIdle = time.Second

// gateTurn is how long a flusher holding a slot of the Gate writes before
// it gives the slot to the flusher that has waited longest (as the host's
// busy stream readers do, host/readpace.go).
const gateTurn = 250 * time.Microsecond

// Gate is how the streaming Writers of one process take turns at
// writing: a Writer made with NewGated whose flusher has written
// gateAfter bytes without pausing writes only while it holds one of the
// Gate's slots, first come first served, and gives the slot back before
// it waits for anything (a full socket, an empty queue) and after each
// gateTurn of writing.
//
// Why: when the peer reads as fast as the process writes, every socket it
// drains wakes that connection's flusher, whose write wakes its sender,
// and hundreds of them are runnable at once (a child's run queue held
// 300 to 430 goroutines, nearly all flushers, beside 512 streams the host
// read flat out). A goroutine that becomes runnable meanwhile (the
// control reader answering a ping, a new connection's reader, a small
// call's handler) waits behind all of them. With the Gate, at most one
// streaming flusher per slot is runnable, and their senders block on the
// full queue (maxPending) while their flusher waits for its turn: that is
// the Writer's ordinary backpressure.
//
// The waiting flushers are at most one per gated Writer (a flusher waits
// for one slot at a time), so the Gate's queue is bounded by the open
// connections. Safe for concurrent use.
type Gate struct {
	mu    sync.Mutex
	free  int             // slots nobody holds
	queue []chan struct{} // the flushers waiting, oldest at queue[head]
	head  int
}

// NewGate returns a Gate of slots slots (at least 1); one per processor
// (runtime.GOMAXPROCS) lets every processor write while no more than
// that many streaming flushers are runnable.
func NewGate(slots int) *Gate { return &Gate{free: max(slots, 1)} }

// enter takes a slot, waiting in line while none is free (wait is the
// caller's own channel of size 1); it reports whether it waited.
func (g *Gate) enter(wait chan struct{}) bool {
	g.mu.Lock()
	if g.free > 0 && g.head == len(g.queue) {
		g.free--
		g.mu.Unlock()
		return false
	}
	g.queue = append(g.queue, wait)
	g.mu.Unlock()
	<-wait // a leave hands its slot over
	return true
}

// waiting reports whether a flusher waits for a slot.
func (g *Gate) waiting() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.head < len(g.queue)
}

// leave gives a slot back: to the flusher waiting longest, if any.
func (g *Gate) leave() {
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
