package host

import (
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/skulkrt/skulk/internal/nbsys"
)

// The host's busy stream readers take turns through a turns.Gate
// (Host.busy). A reader is busy once it has read for readerYieldEvery
// without its connection making it wait (a stream the child writes flat out). A busy reader goes
// on only while it holds one of the gate's slots (one per processor,
// GOMAXPROCS at Start); the others wait in the gate, first come first
// served, not in the Go scheduler's run queues.
//
// Without the gate every busy reader is runnable all the time, and each
// yields (runtime.Gosched) to the back of the run queue: with thousands of
// busy streams any other goroutine that becomes runnable (a small call's
// caller woken by its answer, the control reader, the supervisor) waits
// behind all of them, N × readerYieldEvery / cores (half a second at 4,096
// streams). With it, at most one busy reader per processor is runnable, so
// such a goroutine waits behind a few turns of readerYieldEvery, while the
// busy readers still share the host's CPU in turn. A reader that
// had to wait for its connection, or has just been given the connection
// (a new call), is not busy and does not queue: the slot matters only to
// readers that never wait.
//
// A reader never waits for anything while holding a slot: it leaves the
// gate before its read waits for the connection (connSource), before it
// waits for room in a full outbox (outbox.put), when the caller's Recv
// stops reading (callerRead), and when the call is released (unbind).

// pace is where a reader that has read for readerYieldEvery without
// waiting lets others run: it becomes busy, gives its slot of the busy
// gate (if it holds one) to the reader waiting longest, waits for a slot
// in its turn, and, when nobody was waiting, yields the processor to the
// goroutines outside the gate. It reports false when a reading Recv's
// wait for the slot ended with its context (see enterGate). Called by the
// holder of the read turn.
func (rd *reader) pace() bool {
	rd.leaveGate()
	rd.busy = true
	waited, ok := rd.enterGate()
	if !waited {
		runtime.Gosched()
	}
	rd.yielded = time.Now()
	return ok
}

// enterGate takes a slot of the busy gate, waiting in line while none is
// free, and reports whether it waited (its slice of reading then starts
// anew). A busy reader that left the gate (its caller stopped reading, or
// it waited for room in the outbox) takes a slot again before it reads.
// A reading Recv waits only as long as its context and its call's
// (gateStop) last: then it leaves the line and enterGate reports false
// for ok, so that Recv returns at once (its reading goes to the reader
// goroutine, see callerRead). Once the connection failed nobody waits:
// the reader goes on without a slot, to read what is left and the error.
// Called by the holder of the read turn.
func (rd *reader) enterGate() (waited, ok bool) {
	if rd.gateWait == nil {
		rd.gateWait = make(chan struct{}, 1)
	}
	g := rd.c.ch.h.busy
	if g.Join(rd.gateWait) {
		rd.gated = true
		return false, true
	}
	select {
	case <-rd.gateWait:
		rd.gated = true
		rd.yielded = time.Now()
		return true, true
	case <-rd.c.closing:
		ok = true
	case <-rd.gateStop[0]:
	case <-rd.gateStop[1]:
	}
	if g.Quit(rd.gateWait) { // handed a slot as it quit: the next reader's
		g.Leave()
	}
	return true, ok
}

// leaveGate gives up the busy gate's slot the reader holds, if any: the
// reader is about to wait, or stops reading (it stays busy until a read
// waits for the connection). Called by the holder of the read turn.
func (rd *reader) leaveGate() {
	if rd.gated {
		rd.gated = false
		rd.c.ch.h.busy.Leave()
	}
}

// connSource is what the packetio.Reader of a stream or call connection
// reads from: the socket, read through its syscall.RawConn with raw
// system calls (package nbsys says why), so that the reader can also be
// told when a read has to wait for the child (the socket is empty): a
// stream connection's reader then leaves the busy gate, and starts a new
// busy interval once the read returns (streamConn.readWaits). Errors are
// those of a net.Conn's Read: io.EOF, a deadline's (matching
// os.ErrDeadlineExceeded), a closed connection's (net.ErrClosed), or the
// socket's, as *net.OpError. Used by one reader at a time.
type connSource struct {
	nc net.Conn
	r  *nbsys.Conn
}

// newConnSource returns a connSource over nc, whose RawConn is rc;
// onWait, if not nil, is called each time a read finds the socket empty,
// before it waits.
func newConnSource(nc net.Conn, rc syscall.RawConn, onWait func()) *connSource {
	return &connSource{nc: nc, r: nbsys.NewConn(rc, onWait)}
}

func (s *connSource) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, sysErr, waitErr := s.r.ReadRaw(p)
	switch {
	case waitErr != nil: // the deadline, or the connection closed
		return 0, waitErr
	case sysErr != nil:
		return 0, &net.OpError{Op: "read", Net: "unix", Source: s.nc.LocalAddr(), Addr: s.nc.RemoteAddr(), Err: os.NewSyscallError("read", sysErr)}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// readWaits is a stream connection's connSource's onWait: the read found
// the socket empty and is about to wait for the child.
func (c *streamConn) readWaits() {
	c.leaveGate()
	c.waited = true
}
