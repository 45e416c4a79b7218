package coalesce

import "time"

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
// short gap it would never take turns at all; a stream that pauses for a second
// is not one that keeps a processor busy.
const gateIdle = time.Second

// gateTurn is how long a flusher holding a slot of its gate writes before
// it gives the slot to the flusher that has waited longest (as the host's
// busy stream readers do, host/readpace.go).
const gateTurn = 250 * time.Microsecond

// A streaming Writer takes turns with the others of its process at
// writing through a turns.Gate: a Writer made with NewGated whose flusher
// has written gateAfter bytes without pausing writes only while it holds one of the
// gate's slots, first come first served, and gives the slot back before
// it waits for anything (a full socket, an empty queue) and after each
// gateTurn of writing.
//
// Why: when the peer reads as fast as the process writes, every socket it
// drains wakes that connection's flusher, whose write wakes its sender,
// and hundreds of them are runnable at once (a child's run queue held
// 300 to 430 goroutines, nearly all flushers, beside 512 streams the host
// read flat out). A goroutine that becomes runnable meanwhile (the
// control reader answering a ping, a new connection's reader, a small
// call's handler) waits behind all of them. With the gate, at most one
// streaming flusher per slot is runnable, and their senders block on the
// full queue (maxPending) while their flusher waits for its turn: that is
// the Writer's ordinary backpressure.
//
// The waiting flushers are at most one per gated Writer (a flusher waits
// for one slot at a time), so the gate's line is bounded by the open
// connections.
