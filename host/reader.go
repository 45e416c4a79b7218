package host

import (
	"errors"
	"os"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/sequence"
	"github.com/skulkrt/skulk/wire"
)

// reader is the host's one reader of a stream connection: it reads the
// provider's packets for the call bound to the connection, checks them
// and hands them to the call, and it owns the provider direction of that
// call: the provider fence, the sequence after the last frame given to
// the caller, and the putting side of the call's outbox (the only puts of
// provider frames). bind resets it for each call.
//
// One goroutine at a time runs it: whoever holds the connection's read
// turn (readTurn), which passes under streamConn.mu, and with it every
// field below. That is the bound call's own Recv (streamConn.callerRead)
// until something needs the connection read while the caller is not in
// Recv, then the connection's reader goroutine (streamConn.run); both run
// the same readBurst. The caller has a read turn beside the reader
// goroutine for a measured reason (a caller that waits in Recv reads
// its answer itself, which saves waking the reader and then the caller
// for every read: see turnCaller, and docs/performance.md, "Mechanisms
// and their measured reasons").
type reader struct {
	c *streamConn
	r *packetio.Reader

	// The bound call's provider direction, set by bind.
	fence sequence.Fence // provider frames, from sequence 1
	given uint64         // sequence after the last frame given to the caller (a synthetic terminal's)
	out   *outbox        // the call's queue of frames for Recv; this reader is its only putter

	// at is when the packets in the reader's buffer arrived: the clock is
	// read once per read of the connection, not once per frame. burstEnd:
	// no whole packet is left in the buffer, so the next ReadPacket reads
	// the connection (and the last packet was the last of its burst).
	at       time.Time
	burstEnd bool
	yielded  time.Time     // when the reader last yielded (pace), or last waited for the connection
	inBurst  int           // frames read since the last look at the clock (readBurst)
	waited   bool          // the last read of the connection waited for the child (connSource)
	busy     bool          // the reader has read for readerYieldEvery without waiting, and has not waited since (pace)
	gated    bool          // the reader holds a slot of the host's busy gate (pace)
	gateWait chan struct{} // size 1: where pace waits for a slot of the busy gate; made at its first wait
	// gateStop ends a wait for a slot of the busy gate (enterGate): the
	// Done channels of a reading Recv's context and of its call's; nil
	// (never) while the reader goroutine reads.
	gateStop [2]<-chan struct{}

	leaveGateFn func() // leaveGate, made once: what outbox.putBatch calls before it waits
}

// bindCall makes the reader's provider direction call's: its fence from
// sequence 1 and its outbox. Called by bind, while nobody reads.
func (rd *reader) bindCall(call *Call) {
	rd.fence = *sequence.New(call.id, frame.ProviderToCaller, 1)
	rd.given = 1
	rd.out = &call.out
	rd.r.ExpectCallID(call.id)
}

// yieldCheckEvery is how many frames of one burst readBurst reads between
// looks at the clock (at the start of a batch): a burst (what one read of the connection returned,
// up to the Reader's 16 KiB buffer: hundreds of small frames) can take
// milliseconds to handle under load, and a reader that looked only at a
// burst's end would keep its processor for the whole burst. A look costs a
// clock read; one per 32 packets is lost in the cost of the packets.
const yieldCheckEvery = 32

// readResult is what readBurst did.
type readResult uint8

const (
	readMore        readResult = iota // the call goes on
	readDone                          // the call was released, or the connection failed
	readInterrupted                   // the reading Recv's context ended the read (callerRead)
)

// burstFrames bounds the provider frames readBurst decodes and checks
// before it records and queues them together: one lock of the call log
// and one of the outbox for up to 16 frames, where a lock per frame of
// each, and of the outbox again for every take, costs a seventh of the
// host's CPU on a stream of small frames (docs/performance.md). The batch
// lives on readBurst's stack (16 frames of 88 bytes), only while it reads.
const burstFrames = 16

// readBurst reads and handles packets of call; the caller has the turn.
// It reads the connection at most once, at its first packet, and goes on
// with the packets already whole in the reader's buffer, up to
// burstFrames frames and lendBytes of payload and media: their chunks are recorded in the call log and
// queued to the outbox together, the caller published at the burst's end
// (see outbox). A terminal, a violation, the end or an error ends the
// batch, and what came before it is queued first.
func (rd *reader) readBurst(call *Call) readResult {
	// A reader whose socket always has data never waits: once it has
	// read for readerYieldEvery (which says why and what it costs) since
	// it last yielded or waited, it is busy and takes turns through the
	// host's busy gate (pace, readpace.go), looking at the clock at a
	// burst's end and every yieldCheckEvery packets within one. A busy
	// reader that left the gate takes a slot again before it reads. A
	// batch is queued before anything that may wait: it never holds frames
	// back from the caller.
	ok := true
	switch {
	case rd.busy && !rd.gated:
		_, ok = rd.enterGate() // a busy reader reads only while it holds a slot
	case rd.burstEnd:
		rd.inBurst = 0
		if rd.at.Sub(rd.yielded) >= readerYieldEvery {
			ok = rd.pace()
		}
	case rd.inBurst >= yieldCheckEvery:
		rd.inBurst = 0
		if time.Since(rd.yielded) >= readerYieldEvery {
			ok = rd.pace()
		}
	}
	if !ok { // a reading Recv's context ended while it waited for a slot; nothing was read
		return readInterrupted
	}
	var batch [burstFrames]frame.Frame
	n := 0
	// size bounds the batch's payload and media bytes as the outbox's
	// take bounds what it lends: a batch ends after the frame that takes
	// it to lendBytes, so that a caller's Recv filling its own outbox to
	// half (callerRead) never finds it full, which it would wait on
	// forever, being the one to empty it.
	size := 0
	// The frames read and their inline media bytes, added to the host's
	// counters before any of them reaches the caller (a caller that saw a
	// call end finds its frames in Stats): by deliver, and before a
	// terminal or a refused frame ends the call.
	var cnt readCount
	for {
		pkt, err := rd.r.ReadPacket()
		if rd.burstEnd {
			rd.at = time.Now()
			if rd.waited { // the read waited for the child: not busy (connSource left the gate)
				rd.waited, rd.busy = false, false
				rd.yielded = rd.at
			}
		}
		rd.burstEnd = !rd.r.PacketBuffered()
		if err != nil {
			if n > 0 && !rd.deliver(call, batch[:n], true, &cnt) {
				return readDone
			}
			if errors.Is(err, os.ErrDeadlineExceeded) && rd.c.isInterrupted() {
				rd.burstEnd = true // nothing was read
				return readInterrupted
			}
			rd.c.broken(call, err)
			return readDone
		}
		p, ok := pkt.(*wire.Frame)
		if !ok {
			if n > 0 && !rd.deliver(call, batch[:n], true, &cnt) {
				return readDone
			}
			if p, ok := pkt.(*wire.End); ok {
				if !call.providerDone.Load() || p.CallID != call.id {
					rd.c.violation(call, "end packet out of order")
					return readDone
				}
				rd.c.ended(call)
				return readDone
			}
			rd.c.violation(call, packetio.TypeOf(pkt).String()+" packet on a stream connection")
			return readDone
		}
		f := &p.Frame
		cnt.frames++
		rd.inBurst++
		cnt.media += mediaLen(f.Media)
		if reason := rd.checkProvider(call, f); reason != "" {
			if n > 0 && !rd.deliver(call, batch[:n], true, &cnt) {
				return readDone
			}
			rd.c.ch.h.traffic.received(&cnt) // the refused frame crossed too
			rd.c.violation(call, reason)
			return readDone
		}
		if f.Kind.IsTerminal() {
			// The chunks before it are queued (and recorded) first.
			if n > 0 && !rd.deliver(call, batch[:n], true, &cnt) {
				return readDone
			}
			rd.c.ch.h.traffic.received(&cnt)
			call.finish(*f, "")
			call.terminalClocks(!rd.burstEnd)
			return readMore
		}
		batch[n] = *f // the Reader reuses p for its next packet
		n++
		size += frameBytes(f)
		if rd.burstEnd || n == burstFrames || size >= lendBytes {
			if !rd.deliver(call, batch[:n], rd.burstEnd, &cnt) {
				return readDone
			}
			return readMore
		}
	}
}

// checkProvider checks one provider frame of call against the call's
// state (no frame after the terminal), the provider fence and the tool's
// output or result schema, and returns why it is refused, or "". The
// fence takes f's sequence when it is accepted. Called by the holder of
// the read turn.
func (rd *reader) checkProvider(call *Call, f *frame.Frame) string {
	if call.providerDone.Load() {
		return "frame after the provider terminal"
	}
	if err := rd.fence.Accept(f); err != nil {
		return "provider frame refused: " + err.Error()
	}
	var err error
	switch f.Kind {
	case frame.KindChunk:
		if f.Payload != nil {
			err = validate(call.tool.Output, f.Payload)
		}
	case frame.KindCompleted:
		if f.Payload != nil {
			err = validate(call.tool.Result, f.Payload)
		}
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

// deliver adds cnt, the frames read so far, to the host's counters,
// records the checked, non-terminal frames fs of call in the call log, all
// received at rd.at, and queues them to the caller, publishing them when
// publish is set (see outbox.putBatch); it reports whether the connection
// goes on. Recorded before the caller can read them, so that
// Text and Events include every chunk Recv returned; recording never
// blocks (the log only queues), queueing blocks while the outbox is full.
func (rd *reader) deliver(call *Call, fs []frame.Frame, publish bool, cnt *readCount) bool {
	rd.c.ch.h.traffic.received(cnt)
	call.rec.OutputsAt(fs, rd.at)
	k := rd.out.putBatch(fs, publish, rd.c.closing, rd.leaveGateFn)
	if k > 0 {
		rd.given = fs[k-1].Sequence + 1
	}
	if k < len(fs) {
		rd.c.broken(call, nil)
		return false
	}
	return true
}
