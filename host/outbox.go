package host

import (
	"sync"

	"github.com/skulkrt/skulk/frame"
)

// outQueue bounds the provider frames delivered to a call and not yet read
// by its caller (64 frames of 88 bytes each, 5.5 KiB, plus what they point
// to; the queue starts at outStart frames and grows only while full). When
// it is full the connection's reader blocks, so the connection is not read
// and the child's writes block: backpressure, never an unbounded buffer.
// The queue is eight times wakeBatch so that the reader goes on decoding
// while the caller it woke is getting a core; the kernel's socket buffers
// hold the rest.
const outQueue = 64 // a power of two, as outStart

// outBytes bounds the payload and inline media bytes queued for a call, so
// that the longer queue does not mean more media held: 16 MiB, what 16
// frames of 1 MiB chunks held before the queue grew past 16 frames. A frame
// is always taken into an empty queue, whatever its size (up to the
// child's max_attachment).
const outBytes = 16 << 20

// wakeBatch is how many queued frames wake a waiting caller in the middle
// of a burst: the caller then reads while the reader decodes the rest,
// instead of after it.
const wakeBatch = 8

// outbox is a call's queue of provider frames: the connection's reader puts,
// the caller's Recv takes. Overflow policy: block (see outQueue).
//
// It exists instead of a channel to batch wake-ups. A channel wakes a
// waiting receiver on every send; a caller that keeps up with its stream
// then sleeps and is woken once per frame, and on a machine with an idle
// core each of those wake-ups is a futex call and a cross-core hand-off
// costing more than the frame's decoding. The reader instead puts the
// frames of one burst (the packets one read of the connection returned)
// and wakes the caller when it is about to read the connection again, or
// once wakeBatch frames are queued. No frame waits for a later one: a burst
// ends as soon as no whole packet is left in the reader's buffer. A full
// outbox (outQueue frames, or outBytes) makes its reader wait until it is
// half empty in both, so that a slow caller wakes the reader once per half
// queue, not once per frame.
type outbox struct {
	ready chan struct{} // size 1: "frames were published"; a full channel already says so
	room  chan struct{} // size 1: "the queue is half empty again"; likewise

	mu          sync.Mutex
	buf         []frame.Frame // the ring: outStart frames at first, doubled while full up to outQueue (powers of two)
	head, n     int           // the queued frames are buf[head:head+n], wrapping; the first lent of them are lent to the caller
	lent        int           // frames at the head handed to the caller's take, not yet given back (see take)
	bytes       int           // payload and inline media bytes of the queued frames, lent ones included
	recvWaiting bool          // a take found the queue empty: the next publish wakes it
	putWaiting  bool          // a put found the queue full: a take that halves it wakes it

	// Owned by the caller's take (the goroutine in Recv), never by a
	// put: the lent frames are lbuf[lpos:lend] (indices wrap with lbuf's
	// length). lbuf is the ring as it was when they were lent: a put that
	// grows the ring copies them and leaves the old ring's slots as they
	// are, and a put writes only past the queued frames, so these slots
	// are read without the lock.
	lbuf       []frame.Frame
	lpos, lend int
}

// lendFrames and lendBytes bound what one take lends the caller (see
// take): half the queue, so that the reader, let go once the queue is
// half empty, fills the other half while the caller reads these; and
// 64 KiB, so that large media is lent one frame at a time and a reader
// waiting for room is let go as soon as it would be one frame at a time.
const (
	lendFrames = outQueue / 2
	lendBytes  = 64 << 10
)

// outStart is the ring's first size: enough for a short call's frames
// (started, a chunk, the terminal), so that only a call that streams pays
// for a longer queue.
const outStart = 4

// init readies a zero outbox in place (a Call holds its own).
func (o *outbox) init() {
	o.ready, o.room, o.buf = make(chan struct{}, 1), make(chan struct{}, 1), make([]frame.Frame, outStart)
}

// growLocked doubles the ring, up to outQueue, and reports whether it did.
func (o *outbox) growLocked() bool {
	if len(o.buf) >= outQueue {
		return false
	}
	nb := make([]frame.Frame, min(2*len(o.buf), outQueue))
	for i := range o.n {
		nb[i] = o.buf[(o.head+i)&(len(o.buf)-1)]
	}
	o.buf, o.head = nb, 0
	return true
}

// put queues f as a batch of one (see putBatch).
func (o *outbox) put(f frame.Frame, publish bool, closing <-chan struct{}, beforeWait func()) bool {
	return o.putBatch([]frame.Frame{f}, publish, closing, beforeWait) == 1
}

// putBatch queues fs in order under one lock, waiting while the queue is
// full until it is half empty or closing is closed; it returns how many of
// fs it queued (fewer than len(fs) only when closing was closed: the rest
// are dropped). Before it waits it publishes what is queued and calls
// beforeWait, if not nil. With publish false a waiting caller is not woken
// for fs unless wakeBatch frames are queued: the reader promises another
// put soon (it has a whole packet buffered), or the call's end, which
// wakes Recv through Call.done.
func (o *outbox) putBatch(fs []frame.Frame, publish bool, closing <-chan struct{}, beforeWait func()) int {
	o.mu.Lock()
	for i := range fs {
		for o.fullLocked() {
			o.wakeRecvLocked() // whatever is queued is published before waiting
			o.putWaiting = true
			o.mu.Unlock()
			if beforeWait != nil {
				beforeWait()
			}
			select {
			case <-o.room:
			case <-closing:
				return i
			}
			o.mu.Lock()
		}
		o.buf[(o.head+o.n)&(len(o.buf)-1)] = fs[i]
		o.n++
		o.bytes += frameBytes(&fs[i])
	}
	if publish || o.n >= wakeBatch {
		o.wakeRecvLocked()
	}
	o.mu.Unlock()
	return len(fs)
}

// fullLocked reports whether a put must wait: outBytes are queued, or
// outQueue frames. A full ring shorter than outQueue is grown instead.
func (o *outbox) fullLocked() bool {
	if o.n > 0 && o.bytes >= outBytes {
		return true
	}
	return o.n == len(o.buf) && !o.growLocked()
}

// frameBytes is what f counts against outBytes.
func frameBytes(f *frame.Frame) int {
	n := len(f.Payload)
	if m, ok := f.Media.(*frame.InlineMedia); ok && m != nil {
		n += len(m.Data)
	}
	return n
}

func (o *outbox) wakeRecvLocked() {
	if o.recvWaiting && o.n > 0 {
		o.recvWaiting = false
		select {
		case o.ready <- struct{}{}:
		default:
		}
	}
}

// stalled reports whether the reader waits for the caller to take frames.
func (o *outbox) stalled() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.putWaiting
}

// fill reports how many frames are queued and whether the queue is under
// half its bounds (frames and bytes), so that a caller that fills it
// itself stops well before a put would wait.
func (o *outbox) fill() (n int, room bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n, o.n < outQueue/2 && o.bytes < outBytes/2
}

// take returns the oldest queued frame. When the queue is empty it reports
// false and arms ready: the caller may wait on it for the next publish.
//
// It takes the lock once per batch, not once per frame: the frames queued
// when it looks (at most lendFrames, and lendBytes past the first) are
// lent to the caller, which takes them one by one without the lock, and
// are given back, their slots freed and their bytes uncounted, by the take
// after the last of them. Until then they count against the queue's
// bounds, which therefore hold for what the caller has not yet taken plus
// what it was lent.
func (o *outbox) take() (frame.Frame, bool) {
	if o.lpos != o.lend {
		f := o.lbuf[o.lpos&(len(o.lbuf)-1)]
		o.lpos++
		return f, true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.giveBackLocked()
	if o.n == 0 {
		o.recvWaiting = true
		return frame.Frame{}, false
	}
	mask := len(o.buf) - 1
	f := o.buf[o.head]
	k, size := 1, frameBytes(&f)
	for k < o.n && k < lendFrames {
		size += frameBytes(&o.buf[(o.head+k)&mask])
		if size > lendBytes {
			break
		}
		k++
	}
	o.lent = k
	o.lbuf, o.lpos, o.lend = o.buf, o.head+1, o.head+k
	return f, true
}

// giveBackLocked frees the slots of the frames lent by the last take,
// which the caller has all taken, and lets a waiting put go once the
// queue is half empty.
func (o *outbox) giveBackLocked() {
	if o.lent == 0 {
		return
	}
	mask := len(o.buf) - 1
	for range o.lent {
		o.bytes -= frameBytes(&o.buf[o.head])
		o.buf[o.head] = frame.Frame{} // keep no payload or media alive
		o.head = (o.head + 1) & mask
	}
	o.n -= o.lent
	o.lent = 0
	o.lbuf, o.lpos, o.lend = nil, 0, 0
	if o.putWaiting && o.n <= len(o.buf)/2 && o.bytes <= outBytes/2 {
		o.putWaiting = false
		select {
		case o.room <- struct{}{}:
		default:
		}
	}
}
