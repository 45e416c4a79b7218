package remote

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/skulkrt/skulk/remote/internal/message"

	"github.com/nats-io/nats.go"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/protocol"
)

// linkError is why a call's link ended before its fin: the synthetic
// terminal the caller gets (its code and message).
type linkError struct {
	code frame.Code
	msg  string
}

func (e *linkError) Error() string { return "remote: " + e.code.String() + ": " + e.msg }

// The causes a link ends with.
var (
	errNoHosts  = &linkError{frame.CodeUnreachable, "no host serves this name"}
	errSilent   = &linkError{frame.CodeUnreachable, "no message from the other side within the heartbeat timeout"}
	errGap      = &linkError{frame.CodeTransportError, "a message of the call was lost or came out of order"}
	errOverrun  = &linkError{frame.CodeInvalidFrame, "the other side sent beyond its credit"}
	errUnwanted = &linkError{frame.CodeInvalidFrame, "a message the call did not expect"}
	errWrongWay = &linkError{frame.CodeInvalidFrame, "a message that flows only the other way"}
	errNoFin    = &linkError{frame.CodeInvalidFrame, "no fin within the heartbeat timeout after the terminal"}
	errClosed   = &linkError{frame.CodeUnreachable, "closed on this side"}
	errPublish  = &linkError{frame.CodeUnreachable, "the NATS connection failed"}
)

// linkViolation is the cause of a link ended by a malformed message.
func linkViolation(err error) *linkError {
	if me, ok := err.(*message.Error); ok {
		return &linkError{frame.CodeInvalidFrame, "a message of the call broke the protocol: " + me.Field + ": " + me.Reason}
	}
	return &linkError{frame.CodeInvalidFrame, "a message of the call broke the protocol"}
}

// link is one side of one call over NATS: a byte stream each way,
// carried in numbered messages, with credit-based flow control and
// heartbeats (docs/protocol.md §10). The call's packets (wire's format)
// travel in the streams; the link knows nothing of them.
//
// Delivery (the subscription's callback) never blocks: a message is
// checked and queued, or the link fails. Read and write block.
type link struct {
	nc     *nats.Conn
	caller bool   // the caller's side of the call (else the serving host's); set before the link takes a message
	window uint64 // our receive window: the most stream bytes we hold unread
	frag   int    // stream bytes per data message we send
	token  string // the link's key in its owner's table (the last token of our subject)

	// Owned by the one goroutine that writes the stream at a time (the
	// caller's Send/CloseSend under the call's sendMu, or the serving
	// side's output pump).
	sent uint64 // stream bytes sent

	pubMu   sync.Mutex // publishes in sequence order
	outSeq  uint64     // next message number; guarded by pubMu
	scratch []byte     // one message being encoded; guarded by pubMu

	lastSent  atomic.Int64 // unix nanos of the last publish
	lastHeard atomic.Int64 // unix nanos of the last message taken

	mu         sync.Mutex
	changed    chan struct{} // closed and replaced at every change below; guarded by mu
	failed     chan struct{} // closed once err is set
	out        string        // the peer's subject; "" until an accept (caller side)
	limit      uint64        // the peer's credit: stream offset we may send up to
	inSeq      uint64        // the next message number expected
	queue      [][]byte      // received stream bytes not read yet; at most window bytes (credit), held in about that much memory (enqueueLocked)
	tailOwned  bool          // the last of queue is a chunk of copied small messages (enqueueLocked)
	recvd      uint64        // stream bytes received
	consumed   uint64        // stream bytes read
	granted    uint64        // stream offset the peer may send up to
	fin        bool
	finFlags   uint64
	cancelled  bool              // the peer sent cancel
	wantCancel bool              // this side cancelled before the peer's accept: sent with it
	onCancel   func()            // run (outside mu) when a cancel arrives
	tree       string            // the serving host's tree of the call (caller side); "" until a tree message
	onTree     func(tree string) // run (outside mu) when the tree message arrives; set before the open is published
	err        error             // first cause of the link's end
}

func newLink(nc *nats.Conn, token string, window uint64, frag int) *link {
	l := &link{nc: nc, token: token, window: window, frag: frag, granted: window,
		changed: make(chan struct{}), failed: make(chan struct{})}
	now := time.Now().UnixNano()
	l.lastSent.Store(now)
	l.lastHeard.Store(now)
	return l
}

// notifyLocked wakes every waiter; mu is held.
func (l *link) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// fail ends the link with err unless it already ended; it reports
// whether err is the cause.
func (l *link) fail(err error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return false
	}
	l.err = err
	close(l.failed)
	l.notifyLocked()
	return true
}

// abort ends the link with err and tells the peer why (best effort).
func (l *link) abort(err *linkError) {
	if l.fail(err) {
		_ = l.publish(message.KindAbort, uint64(err.code), []byte(cutReason(err.msg)))
	}
}

// cause returns why the link ended, or nil.
func (l *link) cause() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// publish sends one message to the peer; a failed publish fails the
// link.
func (l *link) publish(kind message.Kind, arg uint64, body []byte) error {
	l.mu.Lock()
	out := l.out
	l.mu.Unlock()
	if out == "" {
		return nil // nobody to tell yet (a caller before the accept)
	}
	l.pubMu.Lock()
	defer l.pubMu.Unlock()
	l.scratch = message.Append(l.scratch[:0], message.Message{Kind: kind, Seq: l.outSeq, Arg: arg, Body: body})
	l.outSeq++
	err := l.nc.Publish(out, l.scratch)
	if cap(l.scratch) > 64<<10 {
		l.scratch = nil // keep no large buffer between fragments of rare large media
	}
	l.lastSent.Store(time.Now().UnixNano())
	if err != nil {
		l.fail(errPublish)
		return errPublish
	}
	return nil
}

// publishTo sends message 0 to subj with reply set (an open).
func (l *link) publishTo(subj, reply string, kind message.Kind, arg uint64, body []byte) error {
	l.pubMu.Lock()
	defer l.pubMu.Unlock()
	b := message.Append(nil, message.Message{Kind: kind, Seq: l.outSeq, Arg: arg, Body: body})
	l.outSeq++
	l.lastSent.Store(time.Now().UnixNano())
	if err := l.nc.PublishRequest(subj, reply, b); err != nil {
		l.fail(errPublish)
		return errPublish
	}
	return nil
}

// accepted sets the peer's subject and credit (the serving side, at its
// accept; sent is what the open carried).
func (l *link) accepted(out string, limit, sent uint64) {
	l.mu.Lock()
	l.out, l.limit = out, limit
	l.notifyLocked()
	l.mu.Unlock()
	l.sent = sent
}

// write sends p in data messages within the peer's credit, blocking while
// there is none (backpressure) until ctx ends or the link fails. A write
// cut short leaves the stream broken: the caller fails the link.
func (l *link) write(ctx context.Context, p []byte) error {
	for len(p) > 0 {
		l.mu.Lock()
		for l.err == nil && (l.out == "" || l.limit <= l.sent) {
			ch := l.changed
			l.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			l.mu.Lock()
		}
		err, room := l.err, l.limit-l.sent
		l.mu.Unlock()
		if err != nil {
			return err
		}
		n := min(uint64(len(p)), room, uint64(l.frag))
		if err := l.publish(message.KindData, 0, p[:n]); err != nil {
			return err
		}
		l.sent += n
		p = p[n:]
	}
	return nil
}

// Read reads the peer's stream: it blocks until bytes are there, and
// returns io.EOF after the peer's fin, or the link's cause once it
// failed. Reading gives the peer credit back: once half the window was
// read, the peer may send a window's worth past what was read.
func (l *link) Read(p []byte) (int, error) {
	l.mu.Lock()
	for len(l.queue) == 0 && !l.fin && l.err == nil {
		ch := l.changed
		l.mu.Unlock()
		<-ch // ends at a delivery or the link's end
		l.mu.Lock()
	}
	if l.err != nil {
		l.mu.Unlock()
		return 0, l.err
	}
	if len(l.queue) == 0 {
		l.mu.Unlock()
		return 0, io.EOF
	}
	n := copy(p, l.queue[0])
	if n == len(l.queue[0]) {
		l.queue[0] = nil
		l.queue = l.queue[1:]
		if len(l.queue) == 0 {
			l.queue = nil // let the backing array go
		}
	} else {
		l.queue[0] = l.queue[0][n:]
	}
	l.consumed += uint64(n)
	var grant uint64
	if l.granted-l.consumed <= l.window/2 && !l.fin {
		l.granted = l.consumed + l.window
		grant = l.granted
	}
	l.mu.Unlock()
	if grant != 0 {
		_ = l.publish(message.KindCredit, grant, nil) // a failed publish fails the link
	}
	return n, nil
}

// cancel sends a cancel to the peer, or with the accept when it has not
// come yet.
func (l *link) cancel() {
	l.mu.Lock()
	if l.out == "" {
		l.wantCancel = true
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	_ = l.publish(message.KindCancel, 0, nil)
}

// opened queues the stream bytes an open carried (the serving side,
// before the link is reachable): message 0 was taken.
func (l *link) opened(data []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inSeq = 1
	if len(data) > 0 {
		l.queue = append(l.queue, data)
		l.recvd = uint64(len(data))
	}
}

// buffered returns the received stream bytes not read yet.
func (l *link) buffered() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.recvd - l.consumed
}

// setOnCancel sets the hook a peer's cancel runs; it runs at once when the
// cancel came already.
func (l *link) setOnCancel(f func()) {
	l.mu.Lock()
	l.onCancel = f
	done := l.cancelled
	l.mu.Unlock()
	if done {
		f()
	}
}

// deliver takes one message of the peer. It never blocks on the reader:
// a message beyond the call's rules fails the link (and tells the peer).
func (l *link) deliver(data []byte) {
	m, err := message.Parse(data)
	if err != nil {
		l.abort(linkViolation(err))
		return
	}
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	if m.Seq != l.inSeq {
		l.mu.Unlock()
		l.abort(errGap)
		return
	}
	l.inSeq++
	l.lastHeard.Store(time.Now().UnixNano())
	if l.out == "" && m.Kind != message.KindAccept && m.Kind != message.KindAbort {
		l.mu.Unlock() // a caller's link before the accept: only an accept or an abort is message 0 (docs/protocol.md §10.2)
		l.abort(errUnwanted)
		return
	}
	if fromCaller, oneWay := direction(m.Kind); oneWay && fromCaller == l.caller {
		l.mu.Unlock() // open and cancel flow only from the caller, accept, fin and tree only from the serving host (docs/protocol.md §10.2)
		l.abort(errWrongWay)
		return
	}
	var bad *linkError
	var hook func()
	switch m.Kind {
	case message.KindAccept:
		if l.out != "" {
			bad = errUnwanted
			break
		}
		l.out, l.limit = string(m.Body), m.Arg
		l.notifyLocked()
		if l.wantCancel {
			hook = func() { _ = l.publish(message.KindCancel, 0, nil) }
		}
	case message.KindData:
		switch {
		case l.fin:
			bad = errUnwanted
		case l.recvd+uint64(len(m.Body)) > l.granted:
			bad = errOverrun
		default:
			l.enqueueLocked(m.Body)
			l.recvd += uint64(len(m.Body))
			l.notifyLocked()
		}
	case message.KindCredit:
		if m.Arg < l.limit {
			bad = errUnwanted
			break
		}
		l.limit = m.Arg
		l.notifyLocked()
	case message.KindPing:
	case message.KindCancel:
		if !l.cancelled {
			l.cancelled = true
			hook = l.onCancel
		}
	case message.KindFin:
		if l.fin {
			bad = errUnwanted
			break
		}
		l.fin, l.finFlags = true, m.Arg
		l.notifyLocked()
	case message.KindTree:
		if l.out == "" || l.fin || l.tree != "" || protocol.CheckCallID(string(m.Body)) != nil {
			bad = errUnwanted
			break
		}
		l.tree = string(m.Body)
		if f, tree := l.onTree, l.tree; f != nil {
			hook = func() { f(tree) }
		}
	case message.KindAbort:
		code := frame.Code(m.Arg)
		if !protocol.KnownCode(code) {
			code = frame.CodeTransportError
		}
		l.err = &linkError{code, protocol.SanitizeMessage(string(m.Body))}
		close(l.failed)
		l.notifyLocked()
	default: // open: only ever the first message, taken by the serving side's endpoint
		bad = errUnwanted
	}
	l.mu.Unlock()
	if bad != nil {
		l.abort(bad)
	}
	if hook != nil {
		hook()
	}
}

// direction reports whether messages of kind k flow one way only and, if
// so, whether from the caller: open and cancel flow only from the caller
// to the serving host, accept, fin and tree only the other way; data,
// credit, ping and abort flow both ways (docs/protocol.md §10.2). A
// one-way message arriving the wrong way ends its call with errWrongWay.
func direction(k message.Kind) (fromCaller, oneWay bool) {
	switch k {
	case message.KindOpen, message.KindCancel:
		return true, true
	case message.KindAccept, message.KindFin, message.KindTree:
		return false, true
	}
	return false, false
}

// smallData is the most bytes of a data message that enqueueLocked copies
// into a shared chunk.
const smallData = 1024

// enqueueLocked queues the bytes of a data message; mu is held. A message
// of smallData bytes or more is kept as it came (the message's own bytes:
// nats.go gives each message new ones), a smaller one is copied onto the
// end of a chunk of small ones that grows to smallData: so a peer that
// spends its credit in tiny messages costs about its window in memory,
// not an allocation and a slice header per byte.
func (l *link) enqueueLocked(b []byte) {
	if len(b) >= smallData {
		l.queue = append(l.queue, b)
		l.tailOwned = false
		return
	}
	if n := len(l.queue); n > 0 && l.tailOwned && len(l.queue[n-1])+len(b) <= smallData {
		last := l.queue[n-1]
		if len(last)+len(b) > cap(last) { // grow by doubling, never past smallData (append's growth may)
			c := make([]byte, len(last), min(smallData, max(2*cap(last), len(last)+len(b))))
			copy(c, last)
			last = c
		}
		l.queue[n-1] = append(last, b...)
		return
	}
	l.queue = append(l.queue, append([]byte(nil), b...))
	l.tailOwned = true
}

// tick runs the link's heartbeat: a ping when nothing was sent for
// interval, and the end (errSilent) when nothing came for timeout.
func (l *link) tick(now int64, interval, timeout time.Duration) {
	if now-l.lastHeard.Load() > int64(timeout) {
		l.abort(errSilent)
		return
	}
	if now-l.lastSent.Load() >= int64(interval) {
		_ = l.publish(message.KindPing, 0, nil)
	}
}

// cutReason cuts s to at most message.MaxReason bytes on a character boundary.
func cutReason(s string) string {
	s = protocol.SanitizeMessage(s)
	if len(s) <= message.MaxReason {
		return s
	}
	n := message.MaxReason
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
