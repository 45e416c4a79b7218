package coalesce

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/turns"
	"github.com/skulkrt/skulk/internal/writev"
	"github.com/skulkrt/skulk/wire"
)

// maxPending bounds the encoded header bytes queued in a Writer behind the
// batch being written. A Write that finds the queue at or above it
// blocks until the flusher has taken it (backpressure), so a Writer holds
// less than twice maxPending plus one packet's header each: the batch being
// written and the queue. Attachments are not queued by copy: their writer
// waits until they are written, except a sender whose context ended while
// it waited, for which the Writer copies what is left of its attachment
// (at most one max_attachment per such sender; see DetachedError).
const maxPending = 64 << 10

// copyAttachment is the largest attachment the Writer copies into its
// queue, behind its packet's header, rather than write from the sender's
// own bytes. A small attachment is then a packet like any other: queued
// and coalesced with the packets around it into one vectored write, and
// its sender goes on at once. Written from the sender's bytes, every
// chunk of 64 bytes or 1 KiB of inline media was a write of its own and a
// wait for it, at a fifth to half of gRPC's rate, which copies every
// message; copying 16 KiB costs less than one system call, and from
// 64 KiB up the chunks move at the raw socket's rate without a copy
// (figures: docs/performance.md). Copied attachments count in the queue's
// bound (maxPending) with the headers.
const copyAttachment = 16 << 10

// quietGap is how long a Writer must have written nothing for a Reply to
// be written on the goroutine that sends it. A packet after a quiet spell
// is a request or a reply: handing it to the flusher would cost a
// goroutine switch (often the wake-up of another core) and there is
// nothing to coalesce it with. Packets that follow each other more closely
// are a stream, and the flusher writes them in batches while their sender
// goes on. A small write takes a few microseconds, so 20 µs tells the two
// apart. With no gap a stream of small chunks takes several times as long
// per frame, and with no sender's own write a small call takes longer
// (figures and command: docs/performance.md, "Mechanisms and their measured reasons").
const quietGap = 20 * time.Microsecond

// YieldEvery is how long a goroutine that moves packets without ever
// waiting (a flusher whose socket always has room, a host stream reader
// whose socket always has data) goes before it yields the processor with
// runtime.Gosched. A gated Writer's flusher (NewGated) takes turns
// through its Gate instead, every gateTurn. Go preempts a goroutine that never blocks only every
// 10 ms, so with thousands of busy connections the goroutine that reads
// pongs waited seconds for a turn, and a healthy child was declared dead
// (the host's TestHealthWhileEveryStreamIsBusy fails without the yields).
// Yielding at every burst instead cost the host 8-25% more CPU per small
// call, stream frame and MiB of media (bench/ab.sh -n 8, in both orders:
// the goroutine moves between processors); see docs/architecture.md
// ("Writing packets") for what once per millisecond costs.
const YieldEvery = time.Millisecond

// Writer writes packets to one connection through one goroutine of its own,
// the flusher, which writes everything queued since its last write in one
// vectored write (writev): packets queued while a write is under way
// are coalesced into the next, and none ever waits for a later one. Where
// there is nothing to coalesce, the goroutine that sends a packet writes it
// itself and saves the switches to the flusher and back: a packet with an
// attachment of more than 16 KiB (smaller ones are copied into the queue,
// copyAttachment) that finds the Writer idle (nothing queued, nothing being
// written), whose writer has to wait for it anyway, a Request that finds
// it idle, and a Reply that finds it idle and quiet; those two do not wait
// for a full socket: the flusher writes the rest while the sender goes on.
// Either way there is one write at a time. Cork and Uncork let one
// goroutine send a few packets as one write.
//
// Write is safe for concurrent use; packets go out in the order their
// calls entered Write. A Writer must be closed with Close, which stops
// the flusher.
type Writer struct {
	dst    writev.Vectored // used by one write at a time (see writeCur)
	limits wire.Limits
	// wake is where the flusher waits: size 1, "something is queued"; a
	// full channel already says so. An ungated Writer's flusher runs only
	// while it has had something to write within flusherLinger (running).
	wake chan struct{}
	// flushers counts the flusher goroutine while it runs; Close waits
	// for it.
	flushers sync.WaitGroup

	// dl is dst's write deadline, when dst has one and a non-blocking
	// descriptor: then a sender whose context may end its wait writes its
	// own attachment, and the context's end interrupts the write with a
	// deadline in the past (see writeCurContext). Set by New.
	dl   deadliner
	dlMu sync.Mutex
	// base is the deadline the Writer's owner set (SetWriteDeadline),
	// which an interruption replaces for a moment; guarded by dlMu.
	base time.Time
	// selfWrite: a sender is writing its own attachment, which its
	// context may interrupt; interrupted: it did; selfGen numbers those
	// writes, so that a late interruption of one leaves the next alone.
	// Guarded by dlMu.
	selfWrite, interrupted bool
	selfGen                uint64

	mu      sync.Mutex
	cond    sync.Cond // broadcast when a batch was written, an error set, or the writer closed
	cur     *batch    // being filled by Write
	spare   *batch    // empty, for the next swap; nil while a batch is in flight
	queued  uint64    // id of cur
	written uint64    // id of the last batch written (or dropped after an error)
	err     error     // sticky: the first write error
	closed  bool
	// running: an ungated Writer's flusher goroutine is running, started
	// by wakeLocked when something is queued for it; it returns once it
	// has found nothing to write for flusherLinger, so that an idle
	// connection holds no goroutine stack for a parked flusher.
	running bool
	corked  int       // open Corks: packets with no attachment written from its sender's bytes wait for the last Uncork
	last    time.Time // when the last write ended; zero before the first
	// handoff is a batch a sender began writing itself and found the
	// socket full for: the flusher writes the rest (see tryWriteCur).
	// While it is set, spare is nil.
	handoff *batch
	handID  uint64 // handoff's id

	// The Gate this Writer's flusher takes turns through (NewGated; nil:
	// none), and the flusher's place in it, all owned by the flusher
	// goroutine (the writev hooks that use them run on it).
	gate      *turns.Gate
	gateWait  chan struct{} // size 1: where the flusher waits for a slot
	gated     bool          // the flusher holds a slot
	heldAt    time.Time     // when it took the slot
	yieldedAt time.Time     // when turn last yielded the processor
	streamed  int           // bytes the flusher wrote since the stream last paused for gateIdle
	fresh     bool          // NewStream was called: streamed starts again; guarded by mu
	// gateTimer ends the flusher's wait for its sender while it holds a
	// slot (waitWake); made at the first such wait.
	gateTimer *time.Timer
	// onFull and onWritable are leaveGate and regate, the hooks hookGate
	// gives the flusher's writes.
	onFull, onWritable func()
}

// batch is the bytes of several packets: headers back to back in hdr, each
// attachment to be written after the header bytes before its offset.
type batch struct {
	hdr  []byte
	atts []attachment
	iov  [][]byte // the write's pieces; reused from batch to batch
}

type attachment struct {
	at   int // offset in hdr after which data goes
	data []byte
}

// New returns a Writer to dst that refuses packets over l (made
// Effective). Its flusher goroutine runs only while something is queued
// for it. The caller must call Close.
func New(dst io.Writer, l wire.Limits) *Writer { return NewGated(dst, l, nil) }

// NewGated is New for a Writer whose flusher runs for as long as the
// Writer is open and, once it streams (it has
// written 64 KiB since the last NewStream without a pause of a second),
// writes only while it holds a slot of g (see Gate); a nil g is New, and
// so is a destination without a non-blocking descriptor (the flusher
// could not give its slot back before it waits). The sender's own writes
// (Reply, Request, an attachment's) never wait for the Gate.
func NewGated(dst io.Writer, l wire.Limits, g *turns.Gate) *Writer {
	w := &Writer{
		limits: packetio.Effective(l), queued: 1, wake: make(chan struct{}, 1),
		cur: &batch{}, spare: &batch{},
	}
	w.dst.Init(dst)
	if d, ok := dst.(deadliner); ok && w.dst.Interruptible() {
		w.dl = d
	}
	w.cond.L = &w.mu
	if g != nil && w.dst.Interruptible() {
		// Only a destination whose writes wait in the runtime's poller
		// lets the flusher give its slot back before a full socket's
		// wait (writev's OnFull); any other is written ungated.
		w.gate, w.gateWait = g, make(chan struct{}, 1)
		w.onFull, w.onWritable = w.leaveGate, w.regate // made once: a method value allocates
		w.flushers.Add(1)
		go w.flush() // stopped by Close; Close waits through flushers
	}
	return w
}

// deadliner is a destination with a write deadline, as a net.Conn or an
// *os.File of a non-blocking descriptor has.
type deadliner interface {
	SetWriteDeadline(t time.Time) error
}

// SetWriteDeadline sets the write deadline of the Writer's destination
// (as net.Conn's does: a write under way or later fails once it passes,
// and the Writer's error is then sticky). Its owner must set the
// destination's deadline here rather than on the destination itself: the
// Writer puts it back after it interrupted a write (see
// Write). A destination without deadlines gives nil.
func (w *Writer) SetWriteDeadline(t time.Time) error {
	d, ok := w.dst.Dest().(deadliner) // w.dl, when that is set
	if !ok {
		return nil
	}
	w.dlMu.Lock()
	defer w.dlMu.Unlock()
	w.base = t
	if w.interrupted {
		return nil // put in place when the interruption ends
	}
	return d.SetWriteDeadline(t)
}

// SetLimits replaces the Writer's limits, as after a handshake.
func (w *Writer) SetLimits(l wire.Limits) {
	w.mu.Lock()
	w.limits = packetio.Effective(l)
	w.mu.Unlock()
}

// Mode says when a sender writes its packets on its own goroutine rather
// than leave them to the flusher. Whatever the mode, there is one write at
// a time and packets go out in the order their Writes began.
type Mode int

const (
	// Stream is for a packet that is one of many: it is queued, and the
	// flusher writes everything queued since its last write in one
	// vectored write while the sender goes on. Only a packet with an
	// attachment that finds the Writer idle is written by its sender,
	// which has to wait for its bytes to be written anyway.
	Stream Mode = iota
	// Reply is for a goroutine that answers a request and has nothing to
	// do while its packet waits: when the Writer is idle and has written
	// nothing for quietGap, the sender writes the packets itself and so
	// saves two goroutine switches; when the socket is full, the flusher
	// writes the rest and the sender goes on. Otherwise it is Stream: a
	// packet that follows another closely is part of a stream, which the
	// flusher coalesces.
	Reply
	// Request is Reply without the quiet gap: the sender writes the
	// packets itself whenever the Writer is idle (nothing queued, nothing
	// being written, outside a Cork). For a request, which nothing before
	// it in the same burst can be coalesced with, the gap could only hand
	// it to the flusher (a request that follows the previous call's
	// writes on its connection within 20 µs), which makes a unary call
	// over a quarter slower (figures and command: docs/performance.md, "Mechanisms and their measured reasons").
	//
	// What a full socket leaves is written by the flusher after Write
	// returned: an error of that write is returned by the Writer's later
	// calls, and a sender that must know the packets are on the wire
	// calls Flush.
	Request
)

// Write validates ps and writes them as one unit: all of them are queued,
// in one write where they fit, or, when one is refused, none of them. mode
// says who writes them (see Mode). Write returns once the packets are
// queued; a packet with an attachment (inline media) of more than 16 KiB,
// once the attachment is written, so that the caller may reuse its bytes
// either way (a smaller attachment is copied into the queue with its
// header, and coalesced with the packets around it). It blocks while the
// queue is full, which is while the connection does not take the bytes:
// that is backpressure.
//
// A ctx that is never done (context.Background()) waits as long as it
// takes. Otherwise a wait for room in the queue ends when ctx is done,
// with context.Cause(ctx) and nothing queued; an attachment queued or being written when ctx is done cannot be
// taken back: the Writer copies what is left of it, writes the packet whole
// from that copy (unless the connection fails) and Write returns a
// *DetachedError, so the caller may reuse its bytes at once either way.
// Where the destination has a write deadline and a non-blocking descriptor
// (a net.Conn, an *os.File of a socket in non-blocking mode), a sender that
// finds the Writer idle writes its attachment itself and waits for a full
// socket as a plain write does; ctx's end interrupts that wait with a write
// deadline in the past, which the Writer then takes back (set the
// destination's own deadline with SetWriteDeadline). Over a destination
// without a non-blocking descriptor, an attachment already being written
// is waited for to the end.
//
// Errors: an invalid-packet error (matching frame.ErrInvalid;
// protocol.AsInvalid names the packet) for a packet that breaks the rules
// (nothing is queued; the connection is unaffected), an error matching
// wire.ErrTooLarge for one over the limits, the connection's write
// error once a write failed (every later call returns it too), ErrClosed
// after Close.
func (w *Writer) Write(ctx context.Context, mode Mode, ps ...wire.Packet) error {
	if ctx.Done() == nil {
		ctx = nil // nothing can interrupt the wait: send arms no watch
	}
	return w.send(ctx, ps, mode)
}

// send queues ps, or writes them itself (see mode). A non-nil ctx ends a
// wait for room in the queue.
func (w *Writer) send(ctx context.Context, ps []wire.Packet, mode Mode) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.cur.hdr) >= maxPending && ctx != nil {
		// Only a sender that has to wait pays for the watch of ctx; it
		// wakes every waiter, and those with a live ctx wait again.
		stop := context.AfterFunc(ctx, w.interrupt)
		defer stop()
	}
	for w.err == nil && !w.closed && len(w.cur.hdr) >= maxPending {
		if ctx != nil && ctx.Err() != nil {
			return context.Cause(ctx)
		}
		w.wakeLocked() // a corked queue at its bound is written all the same
		w.cond.Wait()
	}
	if err := w.unusableLocked(); err != nil {
		return err
	}
	idle := len(w.cur.hdr) == 0 && w.spare != nil // nothing queued, nothing being written
	hdr, atts := w.cur.hdr, len(w.cur.atts)
	for _, p := range ps {
		var att []byte
		var err error
		if hdr, att, err = wire.AppendPacket(hdr, p, w.limits); err != nil {
			clear(w.cur.atts[atts:])
			w.cur.atts = w.cur.atts[:atts] // w.cur.hdr was never extended: nothing is queued
			return err
		}
		switch {
		case len(att) == 0:
		case len(att) <= copyAttachment:
			hdr = append(hdr, att...)
		default:
			w.cur.atts = append(w.cur.atts, attachment{at: len(hdr), data: att})
		}
	}
	w.cur.hdr = hdr
	withAtt := len(w.cur.atts) > atts
	id := w.queued
	switch {
	case idle && (withAtt || w.corked == 0 &&
		(mode == Request || mode == Reply && time.Since(w.last) >= quietGap)):
		// The caller writes its packets itself rather than hand them to
		// the flusher and back: a writer of an attachment has to wait for
		// it anyway, and an idle Writer has nothing to coalesce a request
		// or a reply with. It goes through writeCur as the flusher does,
		// so there is still one writer at a time and packets keep their
		// order. A Reply or a Request without an
		// attachment does not wait for a full socket: the flusher takes
		// the rest over, and the sender goes on as if it had queued the
		// packet (so that only the queue's bound, which a context can
		// interrupt, ever blocks it).
		if !withAtt {
			w.tryWriteCur()
			return w.err
		}
		if ctx == nil {
			w.writeCur()
			return w.err
		}
		if w.dl != nil {
			return w.writeCurContext(ctx, ps)
		}
		// A sender that may stop waiting for its attachment writes what
		// the socket takes now and leaves the rest to the flusher, to
		// wait for below, where ctx can end the wait.
		if w.tryWriteCur() {
			return w.err
		}
	case !withAtt && w.corked > 0:
		return nil // written by the last Uncork, or with whatever goes before it
	default:
		w.wakeLocked()
	}
	if withAtt {
		return w.waitWritten(ctx, id, ps)
	}
	return nil
}

// waitWritten waits until batch id, which holds attachments of ps, is
// written, or a write failed. With a non-nil ctx it stops waiting once ctx
// is done: the attachments' bytes not yet written are copied (see
// detachLocked) and it returns a *DetachedError. w.mu is held.
func (w *Writer) waitWritten(ctx context.Context, id uint64, ps []wire.Packet) error {
	if ctx != nil && w.written < id && w.err == nil {
		stop := context.AfterFunc(ctx, w.interrupt)
		defer stop()
	}
	for w.written < id && w.err == nil {
		if ctx != nil && ctx.Err() != nil && w.detachLocked(id, ps) {
			return &DetachedError{Cause: context.Cause(ctx)}
		}
		w.cond.Wait()
	}
	return w.err
}

// detachLocked makes batch id, not yet written, hold its own copy of what
// is left of ps's attachments, and reports whether it could (see
// writev.Vectored.Detach). Still queued, the batch's attachments are copied
// whole; being written (batches are written one at a time and in order, so
// it is the one in flight), only what the write has not consumed. w.mu is
// held, so the batch cannot be taken for a write meanwhile.
func (w *Writer) detachLocked(id uint64, ps []wire.Packet) bool {
	for _, p := range ps {
		data := inlineData(p)
		if len(data) == 0 {
			continue
		}
		if id == w.queued {
			for i, a := range w.cur.atts {
				if len(a.data) == len(data) && &a.data[0] == &data[0] {
					w.cur.atts[i].data = bytes.Clone(data)
				}
			}
			continue
		}
		if !w.dst.Detach(data) {
			return false
		}
	}
	return true
}

// inlineData is the attachment p is written with: an inline-media frame's
// data, or nil.
func inlineData(p wire.Packet) []byte {
	if f, ok := p.(*wire.Frame); ok {
		if m, ok := f.Media.(*frame.InlineMedia); ok && m != nil {
			return m.Data
		}
	}
	return nil
}

// interrupt wakes the senders waiting for room in the queue, so that those
// with a done context return.
func (w *Writer) interrupt() {
	w.mu.Lock()
	w.cond.Broadcast()
	w.mu.Unlock()
}

// Cork makes the packets without attachments (or with one the Writer
// copies, of up to 16 KiB) that are queued from now on wait for the
// matching Uncork, so that a goroutine sending a few packets one after
// the other (a terminal and its end) sends them in one write; one Write of
// them all is the simpler way when all of them are at hand at once. Corks
// nest; each Cork must be matched by one Uncork, soon: a corked packet is still written at once when the queue
// reaches its bound, when a write already under way or an attachment
// takes it along, and by Flush and Close.
//
// What it saves the child, whose call.finish corks a terminal and its end:
// without the Cork the end follows the terminal within the quiet gap, so
// it goes to the flusher as a second write, a goroutine switch and one
// more wake-up of the host: without the Cork a unary call takes three
// quarters longer and the child's CPU per call doubles (figures and
// command: docs/performance.md, "Mechanisms and their measured reasons").
func (w *Writer) Cork() {
	w.mu.Lock()
	w.corked++
	w.mu.Unlock()
}

// Uncork ends the last Cork: the queued packets are written by the calling
// goroutine when no write is under way, and otherwise by the flusher right
// after that write. It returns the connection's write error, if any.
func (w *Writer) Uncork() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.corked == 0 {
		panic("coalesce: Uncork without Cork")
	}
	w.corked--
	switch {
	case w.corked > 0 || len(w.cur.hdr) == 0 || w.unusableLocked() != nil:
	case w.spare != nil:
		w.writeCur()
	default:
		w.wakeLocked()
	}
	return w.err
}

// TryWrite is Write in Stream mode for a caller that must not block: it queues
// p and reports true when that needs no wait, and otherwise does nothing
// and reports false (the queue is full, or p has an attachment larger
// than the Writer copies, whose writer waits for it). Errors are Write's;
// with one, false.
func (w *Writer) TryWrite(p wire.Packet) (bool, error) {
	if len(inlineData(p)) > copyAttachment {
		return false, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.unusableLocked(); err != nil || len(w.cur.hdr) >= maxPending {
		return false, err
	}
	hdr, att, err := wire.AppendPacket(w.cur.hdr, p, w.limits)
	if err != nil {
		return false, err
	}
	w.cur.hdr = append(hdr, att...) // at most copyAttachment bytes
	if w.corked == 0 {
		w.wakeLocked()
	}
	return true, nil
}

// unusableLocked returns why nothing can be queued now: the sticky write
// error, ErrClosed, or nil. w.mu is held.
func (w *Writer) unusableLocked() error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return ErrClosed
	}
	return nil
}

// wakeLocked tells the flusher something is queued: a gated Writer's
// waits for it, an ungated Writer's is started unless it runs (it looks
// at the queue again before it returns). w.mu is held.
func (w *Writer) wakeLocked() {
	if w.gate == nil && !w.running {
		if len(w.cur.hdr) > 0 || w.handoff != nil {
			w.running = true
			w.flushers.Add(1)
			go w.flush() // returns once idle for flusherLinger, or closed; Close waits through flushers
		}
		return
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Mark returns a mark of the packets queued so far, for Written: what a
// sender that must not wait for them to be written (as Flush does) keeps
// to learn later whether they were. Safe for concurrent use.
func (w *Writer) Mark() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.markLocked()
}

func (w *Writer) markLocked() uint64 {
	if len(w.cur.hdr) > 0 {
		return w.queued
	}
	return w.queued - 1
}

// Written reports whether the packets queued before Mark returned mark
// have been written to the connection (or dropped after a write error,
// which the Writer's later calls return). It does not wait.
func (w *Writer) Written(mark uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.written >= mark
}

// FullSince returns when the write under way first found the connection
// full (its peer not reading), and the zero time when no write is under
// way or the one under way has not met a full connection. The time stays
// until that write ends, however little the peer reads meanwhile: a
// write that has waited long is one whose peer has not read a batch's
// worth (at most twice maxPending plus the attachments being written) in
// that time. It does not wait, and never reports a full connection off
// Unix systems (see writev). Safe for concurrent use.
func (w *Writer) FullSince() time.Time { return w.dst.FullSince() }

// Interruptible reports whether a write under way ends when the write
// deadline set with SetWriteDeadline passes, and reports a full connection
// through FullSince: a destination with a non-blocking descriptor the
// runtime's poller waits for (a net.Conn). Safe for concurrent use.
func (w *Writer) Interruptible() bool { return w.dl != nil }

// Flush waits until every packet queued so far has been written and returns
// the write error, if any.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	id := w.markLocked()
	if id == w.queued {
		w.wakeLocked() // it may be corked
	}
	for w.written < id && w.err == nil {
		w.cond.Wait()
	}
	return w.err
}

// Close writes what is queued, stops the flusher and returns the first write
// error. It does not close the connection. If the peer may have stopped
// reading, close the connection (or set a write deadline) first, or Close
// waits for the peer. Close is idempotent.
func (w *Writer) Close() error {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		w.cond.Broadcast()
		w.wakeLocked()
	}
	if w.gate == nil {
		// Nothing is queued once closed is set, but a sender may be
		// writing its own packets (spare is nil), whose rest a flusher
		// may yet be started for (a handoff).
		for w.running || w.spare == nil {
			w.cond.Wait()
		}
	}
	w.mu.Unlock()
	w.flushers.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// flush is the flusher: it writes what is queued, batch after batch. A
// gated Writer's runs until Close; an ungated Writer's returns once it
// has found nothing to write for flusherLinger (wakeLocked starts it
// again).
func (w *Writer) flush() {
	defer w.flushers.Done()
	var yielded time.Time   // when the flusher last yielded
	var idleSince time.Time // when it last found nothing to write (gated Writers)
	var linger lingerTimer  // ungated Writers
	defer linger.stop()
	for {
		if w.gate != nil {
			w.waitWake()
			if !idleSince.IsZero() && time.Since(idleSince) >= gateIdle {
				w.streamed = 0 // a pause: a new stream, ungated until gateAfter
			}
		}
		w.mu.Lock()
		for {
			if b := w.handoff; b != nil {
				// A sender's write found the socket full: the rest is
				// the flusher's to wait for.
				id := w.handID
				w.handoff = nil
				w.mu.Unlock()
				w.hookGate()
				err := w.dst.Resume()
				w.unhookGate()
				w.finish(b, id, err)
				continue
			}
			if w.spare == nil {
				// A sender is writing its own packet (see send); wait
				// for it to finish.
				w.leaveGate()
				w.cond.Wait()
				continue
			}
			if len(w.cur.hdr) == 0 {
				break
			}
			if w.fresh {
				w.fresh, w.streamed = false, 0
			}
			if w.gate != nil && w.streamed >= gateAfter && w.turn() {
				continue // waited for a slot: look again
			}
			n := len(w.cur.hdr)
			for _, a := range w.cur.atts {
				n += len(a.data)
			}
			w.hookGate()
			w.writeCur()
			w.unhookGate()
			w.streamed += n
			if w.gate == nil && w.last.Sub(yielded) >= YieldEvery {
				// A flusher whose socket always has room never waits
				// either: it yields as a busy reader does (YieldEvery).
				// A gated one takes turns instead (turn).
				yielded = w.last
				w.mu.Unlock()
				runtime.Gosched()
				w.mu.Lock()
			}
		}
		if w.gate == nil {
			if w.closed || !linger.wait(w) {
				w.running = false
				w.cond.Broadcast() // Close may wait for it
				w.mu.Unlock()
				return
			}
			w.mu.Unlock()
			continue
		}
		idleSince = time.Now()
		closed := w.closed
		if closed {
			w.leaveGate()
		}
		w.mu.Unlock()
		if closed {
			return
		}
	}
}

// waitWake waits until something is queued. A streaming flusher that
// holds a slot of the Gate while other flushers wait for one keeps it
// while it waits, until its turn is over: its sender, woken by the flusher's last write, is refilling the
// queue, and that work is the slot's as much as the write is (a slot
// given back at each write would let hundreds of senders refill their
// queues at once outside the Gate). Past the turn, or when the sender does not come back
// within it (a handler doing something else), the slot goes back.
func (w *Writer) waitWake() {
	if w.gated {
		// Nobody waiting for a slot: nothing to hold it against, and no
		// timer to arm for every wake-up of a lone stream.
		if left := gateTurn - time.Since(w.heldAt); left > 0 && w.gate.Waiting() {
			if w.gateTimer == nil {
				w.gateTimer = time.NewTimer(left)
			} else {
				w.gateTimer.Reset(left)
			}
			select {
			case <-w.wake:
				w.gateTimer.Stop()
				return
			case <-w.gateTimer.C:
			}
		}
		w.leaveGate()
	}
	<-w.wake
}

// NewStream tells a gated Writer that the packets from now on are a new
// stream (the connection's next call): its flusher writes gateAfter bytes
// of it before it takes turns through the Gate, so that a fresh call's
// first frames do not wait behind the streams already busy.
func (w *Writer) NewStream() {
	if w.gate == nil {
		return
	}
	w.mu.Lock()
	w.fresh = true
	w.mu.Unlock()
}

// turn makes sure the streaming flusher holds a slot of the Gate before it
// writes: it takes one, waiting in line, when it holds none, and gives
// its slot to the flusher waiting longest (and queues again) once it has
// held it for gateTurn; when nobody waited it yields the processor to the
// goroutines outside the Gate (once per YieldEvery). It reports whether it released w.mu (the
// flusher then looks at the queue again). Called by the flusher with w.mu
// held.
func (w *Writer) turn() (unlocked bool) {
	turnOver := w.gated && time.Since(w.heldAt) >= gateTurn
	if w.gated && !turnOver {
		return false
	}
	w.mu.Unlock()
	if turnOver {
		w.leaveGate()
	}
	if !w.gate.Enter(w.gateWait) && turnOver && time.Since(w.yieldedAt) >= YieldEvery {
		// Nobody waited: yield to the goroutines outside the Gate, as
		// an ungated flusher does, once per YieldEvery.
		runtime.Gosched()
		w.yieldedAt = time.Now()
	}
	w.gated, w.heldAt = true, time.Now()
	w.mu.Lock()
	return true
}

// leaveGate gives back the flusher's slot of the Gate, if it holds one:
// it is about to wait. Called by the flusher (or by the writev hook on
// its goroutine, before a wait for a full socket).
func (w *Writer) leaveGate() {
	if w.gated {
		w.gated = false
		w.gate.Leave()
	}
}

// hookGate has the flusher's next write give its slot back before it
// waits for a full socket, and take one again (when it streams) before it
// writes on; unhookGate undoes it once the write is over, so that a
// sender's own write never touches the Gate. Called by the flusher, the
// one writer at the time.
func (w *Writer) hookGate() {
	if w.gate != nil {
		w.dst.OnFull, w.dst.OnWritable = w.onFull, w.onWritable
	}
}

func (w *Writer) unhookGate() {
	if w.gate != nil {
		w.dst.OnFull, w.dst.OnWritable = nil, nil
	}
}

// regate is the flusher's write taking a slot again after it waited for a
// full socket, while it streams (the hook of writev's OnWritable).
func (w *Writer) regate() {
	if w.streamed >= gateAfter && !w.gated {
		w.gate.Enter(w.gateWait)
		w.gated, w.heldAt = true, time.Now()
	}
}

// writeCur takes the batch being filled and writes it, as the one writer
// (the flusher, or a sender's own Write). It is called with w.mu held and
// w.spare non-nil, releases w.mu during the write and holds it again when it
// returns. After a write error it drops the batch unwritten.
func (w *Writer) writeCur() {
	b, id, failed := w.takeCurLocked()
	w.mu.Unlock()
	var err error
	if !failed {
		err = w.dst.Write()
	}
	w.finish(b, id, err)
}

// writeCurContext is writeCur for a sender whose ctx may end its wait for
// the socket, over a destination with a write deadline (w.dl): the sender
// writes the batch, with ps's attachments, itself, waiting for a full
// socket as a raw write does, rather than hand the rest to the flusher and
// wait to be woken (two goroutine switches for every attachment, often
// wake-ups of other threads): 1 MiB media chunks move about an eighth
// faster (figures and command: docs/performance.md, "Mechanisms and their measured reasons"). When ctx
// ends first, the write is interrupted (a past deadline), what is left of
// ps's attachments is copied, and the flusher writes the rest (with the
// owner's deadline back in place) while the sender gets a
// *DetachedError, as Write says. Called with w.mu held and
// w.spare non-nil; returns holding w.mu.
func (w *Writer) writeCurContext(ctx context.Context, ps []wire.Packet) error {
	b, id, failed := w.takeCurLocked()
	w.mu.Unlock()
	if failed {
		w.finish(b, id, nil)
		return w.err
	}
	w.dlMu.Lock()
	w.selfWrite = true
	w.selfGen++
	gen := w.selfGen
	w.dlMu.Unlock()
	stop := context.AfterFunc(ctx, func() { w.interruptWrite(gen) })
	err := w.dst.ResumeKeep()
	stop()
	if w.endSelfWrite() && errors.Is(err, os.ErrDeadlineExceeded) {
		for _, p := range ps {
			if data := inlineData(p); len(data) > 0 {
				w.dst.Detach(data) // a non-blocking descriptor: it can
			}
		}
		w.mu.Lock()
		w.handoff, w.handID = b, id
		w.wakeLocked()
		w.cond.Broadcast() // the flusher may be waiting for spare
		return &DetachedError{Cause: context.Cause(ctx)}
	}
	w.dst.Unload()
	w.finish(b, id, err)
	return w.err
}

// interruptWrite makes a sender's own write gen (writeCurContext) return
// at once, with a deadline in the past; it does nothing when that write is
// over (its context may end just as it does).
func (w *Writer) interruptWrite(gen uint64) {
	w.dlMu.Lock()
	defer w.dlMu.Unlock()
	if w.selfWrite && w.selfGen == gen && !w.interrupted {
		w.interrupted = true
		w.dl.SetWriteDeadline(time.Unix(1, 0))
	}
}

// endSelfWrite ends a sender's own write and reports whether it was
// interrupted; if so, the owner's deadline is put back.
func (w *Writer) endSelfWrite() (interrupted bool) {
	w.dlMu.Lock()
	defer w.dlMu.Unlock()
	w.selfWrite = false
	interrupted, w.interrupted = w.interrupted, false
	if interrupted {
		w.dl.SetWriteDeadline(w.base)
	}
	return interrupted
}

// tryWriteCur is writeCur for a sender that must not wait for the socket:
// when the socket is full, it hands the rest of the batch to the flusher
// and returns with the batch still in flight, reporting false.
func (w *Writer) tryWriteCur() (done bool) {
	b, id, failed := w.takeCurLocked()
	w.mu.Unlock()
	done, err := true, error(nil)
	if !failed {
		done, err = w.dst.Try()
	}
	if !done {
		w.mu.Lock()
		w.handoff, w.handID = b, id
		w.wakeLocked()
		w.cond.Broadcast() // the flusher may be waiting for spare
		return false
	}
	w.finish(b, id, err)
	return true
}

// takeCurLocked takes the batch being filled for a write and loads its
// pieces into w.dst: spare is nil until finish. w.mu is held. failed says
// a write failed before: the batch is then dropped unwritten.
func (w *Writer) takeCurLocked() (b *batch, id uint64, failed bool) {
	b, id = w.cur, w.queued
	w.cur, w.spare = w.spare, nil
	w.queued++
	if w.err != nil {
		return b, id, true
	}
	b.pieces()
	w.dst.Load(b.iov)
	return b, id, false
}

// finish ends the write of batch id, with its error: it is called without
// w.mu and returns holding it.
func (w *Writer) finish(b *batch, id uint64, err error) {
	b.reset()
	end := time.Now()
	w.mu.Lock()
	w.spare = b
	w.last = end
	w.written = id
	if err != nil && w.err == nil {
		w.err = err
	}
	// Wakes Flush, Write (its attachment written, or room), and the
	// flusher if it waits for spare.
	w.cond.Broadcast()
}

// pieces lays the batch out in b.iov: header bytes and attachments, in
// order.
func (b *batch) pieces() {
	prev := 0
	for _, a := range b.atts {
		if a.at > prev {
			b.iov = append(b.iov, b.hdr[prev:a.at])
		}
		b.iov = append(b.iov, a.data)
		prev = a.at
	}
	if prev < len(b.hdr) {
		b.iov = append(b.iov, b.hdr[prev:])
	}
}

func (b *batch) reset() {
	clear(b.iov) // drop references to attachments
	b.iov = b.iov[:0]
	clear(b.atts)
	b.atts = b.atts[:0]
	b.hdr = b.hdr[:0]
}

// flusherLinger is how long an ungated Writer's flusher waits for more to
// write before it returns. A stream of packets a few microseconds apart
// (an echo's frames, each written as the caller sends it) keeps one
// flusher, woken as a parked one is: returning at once and starting a
// goroutine for every packet cost the host 0.6 µs and an allocation per
// echoed frame. An idle connection holds no flusher past it.
const flusherLinger = 100 * time.Millisecond

// lingerTimer is an ungated flusher's wait for more to write, bounded by
// flusherLinger. Its timer is armed once per linger, not once per wait:
// a wait whose timer fires while the Writer has written within the linger
// waits again for what is left of it.
type lingerTimer struct {
	t     *time.Timer
	armed bool
}

// wait waits, with w.mu held (released meanwhile, held again on return),
// until something is queued (true) or the Writer has written nothing,
// and the flusher has been given nothing, for flusherLinger (false).
func (l *lingerTimer) wait(w *Writer) bool {
	for {
		if !l.armed {
			d := flusherLinger
			if !w.last.IsZero() {
				d = max(flusherLinger-time.Since(w.last), time.Millisecond)
			}
			if l.t == nil {
				l.t = time.NewTimer(d)
			} else {
				l.t.Reset(d)
			}
			l.armed = true
		}
		w.mu.Unlock()
		select {
		case <-w.wake:
			w.mu.Lock()
			return true
		case <-l.t.C:
			l.armed = false
			w.mu.Lock()
			if len(w.cur.hdr) > 0 || w.handoff != nil || w.spare == nil {
				return true
			}
			if time.Since(w.last) >= flusherLinger || w.last.IsZero() {
				return false
			}
		}
	}
}

func (l *lingerTimer) stop() {
	if l.t != nil {
		l.t.Stop()
	}
}
