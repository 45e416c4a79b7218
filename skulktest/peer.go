package skulktest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/testnet"
	"github.com/skulkrt/skulk/wire"
)

// Peer is a host scripted at the wire level: the host's side of a child's
// control connection, and the stream connections it dials. It writes
// exactly the packets the test asks for, valid or not, and hands back
// exactly what the child wrote. It checks nothing on the control
// connection; ReadCall checks a call's output against the provider rules.
//
// A goroutine of its own reads the control connection. The methods that
// wait for control packets (Next, Hello, Handshake, Ping, WaitBye,
// WaitClosed) are for one goroutine at a time, and each waits until its
// context is done or, for a context without a deadline, for at most
// Timeout; the others are safe for concurrent use. A write (Write,
// WriteRaw and the methods that send a packet) waits at most Timeout for
// the child to take it.
type Peer struct {
	h *testnet.Host // the wire-level host, with peerConfig

	// exited is closed once the child is over: its process was waited for
	// (cmd, waitErr) or its Serve returned (serveErr). nil for NewPeer.
	exited   chan struct{}
	cmd      *exec.Cmd
	waitErr  error
	serveErr error
	out      *buffer
}

// peerConfig makes a testnet.Host a Peer and a testnet.Stream a StreamConn:
// waits bounded by Timeout, skulktest's errors.
var peerConfig = testnet.Config{
	Timeout: Timeout, Name: "skulktest",
	ErrControlClosed: ErrControlClosed, ErrUnexpected: ErrUnexpected, ErrProviderRules: ErrProviderRules,
}

// NewPeer starts a Peer on control, the host's end of a child's control
// connection, whose child accepts stream connections at streamsPath (empty
// when the test dials some other way). The caller must call Close. Most
// tests use ServePeer or ExecPeer, which also start the child.
func NewPeer(control net.Conn, streamsPath string) *Peer {
	return &Peer{h: testnet.NewHostConfig(control, streamsPath, peerConfig)}
}

// ServePeer serves opts with child.Serve in the test's process, on a
// socketpair for the control connection and a listener at streams.sock in
// a fresh 0700 directory, and returns a Peer on the other end. The child
// has not been sent startup: call Handshake. When the test ends the Peer
// is closed and ServePeer waits for Serve to return (failing the test if
// it does not within Timeout).
func ServePeer(t testing.TB, opts child.Options) *Peer {
	t.Helper()
	hostEnd, childEnd := testnet.SocketPair(t)
	ln, path := testnet.Listen(t)
	p := NewPeer(hostEnd, path)
	p.exited = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // stopped by the cleanup: the Peer closing control, then cancel
		p.serveErr = child.Serve(ctx, childEnd, child.NewListener(ln.Accept, ln.Close), opts)
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.Close()
		cancel()
		select {
		case <-p.exited:
		case <-time.After(Timeout):
			t.Errorf("skulktest: Serve did not return %v after its Peer closed", Timeout)
		}
	})
	return p
}

// ExecPeer starts the provider binary bin with args as a host starts it
// (docs/protocol.md §1): fd 3 its end of a control socketpair, fd 4 a listener at
// streams.sock in a fresh 0700 directory, stdin /dev/null, stdout and
// stderr collected (Output), in a process group of its own, with the
// SKULK_* environment (child id "test"), PATH, HOME and env. It returns a
// Peer on the host's end; the child has not been sent startup: call
// Handshake. When the test ends the process group is killed and the
// process waited for.
func ExecPeer(t testing.TB, bin string, args []string, env ...string) *Peer {
	t.Helper()
	out := &buffer{}
	cmd := exec.Command(bin, args...)
	cmd.Env = env // after the SKULK_* environment (child id "test"), PATH and HOME
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = time.Second // bounds Wait should a grandchild keep the output open
	control, path := testnet.Exec(t, cmd)
	p := NewPeer(control, path)
	p.cmd, p.out, p.exited = cmd, out, make(chan struct{})
	go func() { // stopped by the process's exit, which the cleanup forces
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.Close()
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-p.exited:
		case <-time.After(Timeout):
			t.Errorf("skulktest: child %d not gone %v after SIGKILL", cmd.Process.Pid, Timeout)
		}
		if t.Failed() {
			t.Logf("child output:\n%s", out.String())
		}
	})
	return p
}

// Errors of a Peer's waits; match them with errors.Is.
var (
	// ErrControlClosed: the control connection reached EOF or failed; the
	// error wraps the read error.
	ErrControlClosed = errors.New("skulktest: control connection closed")
	// ErrUnexpected: the child wrote another packet than the one waited
	// for.
	ErrUnexpected = errors.New("skulktest: unexpected packet")
)

// bound gives ctx a deadline of Timeout from now when it has none.
func bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, Timeout)
}

// Next returns the next control packet the child wrote. A tools packet
// (a changed tool list) comes only after a startup with ToolsUpdates;
// before, it is a protocol error: the control connection is read no
// further, and Next's error matches wire.ErrProtocol.
func (p *Peer) Next(ctx context.Context) (wire.Packet, error) { return p.h.Next(ctx) }

// Hello waits for the child's hello.
func (p *Peer) Hello(ctx context.Context) (*wire.Hello, error) { return p.h.Hello(ctx) }

// DefaultStartup returns the startup Handshake sends when given nil:
// protocol wire.ProtocolVersion, child id "test", default limits, health
// interval 1 s, cancel grace 1 s, ingress queue protocol.IngressQueue.
func DefaultStartup() *wire.Startup { return testnet.DefaultStartup() }

// Handshake waits for hello and answers with st (DefaultStartup when nil).
func (p *Peer) Handshake(ctx context.Context, st *wire.Startup) (*wire.Hello, error) {
	return p.h.Handshake(ctx, st)
}

// Write writes a packet on the control connection and waits until it is
// written, for at most Timeout: past it (the child stopped reading its
// control connection) the error matches os.ErrDeadlineExceeded and the
// packet may have been written in part.
func (p *Peer) Write(pk wire.Packet) error { return p.h.Write(pk) }

// WriteRaw writes b on the control connection as it is, after everything
// written before it: for packets the wire package would not encode. It
// waits as Write does.
func (p *Peer) WriteRaw(b []byte) error { return p.h.WriteRaw(b) }

// Ping sends a ping and waits for the pong with its nonce; other packets
// read meanwhile are kept for Next. It returns the pong and the round trip.
func (p *Peer) Ping(ctx context.Context, nonce uint64) (*wire.Pong, time.Duration, error) {
	return p.h.Ping(ctx, nonce)
}

// Cancel sends a control cancel for callID.
func (p *Peer) Cancel(callID, reason string) error { return p.h.Cancel(callID, reason) }

// Drain sends drain with the given grace.
func (p *Peer) Drain(grace time.Duration) error { return p.h.Drain(grace) }

// WaitBye waits for the child's bye, dropping other packets.
func (p *Peer) WaitBye(ctx context.Context) (*wire.Bye, error) { return p.h.WaitBye(ctx) }

// WaitClosed waits until the child closed the control connection, dropping
// packets read meanwhile.
func (p *Peer) WaitClosed(ctx context.Context) error { return p.h.WaitClosed(ctx) }

// Close closes the control connection (the child sees the host go away)
// and waits for the Peer's reader. It does not stop the child.
func (p *Peer) Close() error { return p.h.Close() }

// Dial opens a new stream connection to the child.
func (p *Peer) Dial(ctx context.Context) (*StreamConn, error) {
	s, err := p.h.Dial(ctx)
	if err != nil {
		return nil, err
	}
	return &StreamConn{Conn: s.Conn, s: s}, nil
}

// ErrNoChild: the Peer was made by NewPeer and knows no child to wait for.
var ErrNoChild = errors.New("skulktest: the peer started no child")

// Wait waits until the child is over and returns its exit status: the
// process's (-1 when a signal ended it), or for ServePeer the status
// child.Run would have returned for Serve's error (ServeError has the
// error itself).
func (p *Peer) Wait(ctx context.Context) (int, error) {
	if p.exited == nil {
		return 0, ErrNoChild
	}
	ctx, cancel := bound(ctx)
	defer cancel()
	select {
	case <-p.exited:
	case <-ctx.Done():
		return 0, fmt.Errorf("skulktest: waiting for the child to exit: %w", ctx.Err())
	}
	if p.cmd == nil {
		return exitStatus(p.serveErr), nil
	}
	var ee *exec.ExitError
	if p.waitErr != nil && !errors.As(p.waitErr, &ee) {
		return 0, p.waitErr
	}
	return p.cmd.ProcessState.ExitCode(), nil
}

// ServeError returns what Serve returned, for a ServePeer whose Wait has
// returned; nil otherwise.
func (p *Peer) ServeError() error {
	if p.exited == nil || p.cmd != nil {
		return nil
	}
	select {
	case <-p.exited:
		return p.serveErr
	default:
		return nil
	}
}

// Signal sends sig to the child's process group (ExecPeer only).
func (p *Peer) Signal(sig syscall.Signal) error {
	if p.cmd == nil {
		return ErrNoChild
	}
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

// PID returns the child's process id: the test process's own for
// ServePeer, 0 for NewPeer.
func (p *Peer) PID() int {
	switch {
	case p.cmd != nil:
		return p.cmd.Process.Pid
	case p.exited != nil:
		return os.Getpid()
	}
	return 0
}

// Output returns what the child process wrote on stdout and stderr so far
// (ExecPeer only).
func (p *Peer) Output() string {
	if p.out == nil {
		return ""
	}
	return p.out.String()
}

// StreamConn is the host side of one stream connection. Writes are synchronous
// (a blocked write is visible to the test) and safe for concurrent use;
// reads are for one goroutine at a time. A StreamConn nobody reads is a host
// that stopped reading: the child's writes fill the socket and block. A
// child that stops reading does the same to the StreamConn's writes, and each
// write waits until its deadline: WriteRawBy's, Timeout from the call for
// the others.
type StreamConn struct {
	// Conn is the connection, for what the methods do not do (CloseWrite,
	// SetReadBuffer). The methods set its read and write deadlines for
	// each read and write and clear them afterwards.
	Conn *net.UnixConn
	// s is the stream on Conn, with peerConfig.
	s *testnet.Stream
}

// NewStream wraps a connected stream connection.
func NewStream(c *net.UnixConn) *StreamConn {
	return &StreamConn{Conn: c, s: testnet.NewStreamConfig(c, peerConfig)}
}

// WriteRaw writes bytes as they are, waiting at most Timeout.
func (s *StreamConn) WriteRaw(b []byte) error { return s.s.WriteRaw(b) }

// WriteRawBy writes bytes as they are, waiting until deadline for the
// kernel to take every byte; past it (the child stopped reading) the error
// matches os.ErrDeadlineExceeded and b may have been written in part, so
// the connection is good only for closing.
func (s *StreamConn) WriteRawBy(b []byte, deadline time.Time) error {
	return s.s.WriteRawBy(b, deadline)
}

// Write encodes pk and writes it, returning when the kernel took every
// byte, waiting at most Timeout.
func (s *StreamConn) Write(pk wire.Packet) error { return s.s.Write(pk) }

// Invoke writes an invoke of tool with args (nil for {}) and timeout (0 for
// none).
func (s *StreamConn) Invoke(callID, tool string, args map[string]any, timeout time.Duration) error {
	return s.s.Invoke(callID, tool, args, timeout)
}

// Request writes a whole call's caller side in one write: the invoke of
// tool with args (nil for {}, no timeout), the caller's started, one chunk
// per payload and the caller's completed. A child reads it as one request
// whose input is over before its handler starts.
func (s *StreamConn) Request(callID, tool string, args map[string]any, chunks ...frame.Payload) error {
	return s.s.Request(callID, tool, args, chunks...)
}

// Caller writes the caller frame f as it is (direction, call id and
// sequence as given: a gap, a replay, a second terminal are the test's to
// choose).
func (s *StreamConn) Caller(f frame.Frame) error { return s.s.Caller(f) }

// Started writes the caller's started frame.
func (s *StreamConn) Started(callID string) error { return s.s.Started(callID) }

// Chunk writes a caller chunk with sequence seq.
func (s *StreamConn) Chunk(callID string, seq uint64, payload frame.Payload, media frame.Media) error {
	return s.s.Chunk(callID, seq, payload, media)
}

// Complete writes the caller's completed terminal with sequence seq.
func (s *StreamConn) Complete(callID string, seq uint64, result frame.Payload) error {
	return s.s.Complete(callID, seq, result)
}

// CancelCall writes the caller's cancelled terminal with sequence seq.
func (s *StreamConn) CancelCall(callID string, seq uint64) error { return s.s.CancelCall(callID, seq) }

// Read reads the next packet the child wrote, waiting at most Timeout.
func (s *StreamConn) Read() (wire.Packet, error) { return s.s.Read() }

// ReadBy reads the next packet the child wrote, waiting until deadline;
// past it the error matches os.ErrDeadlineExceeded.
func (s *StreamConn) ReadBy(deadline time.Time) (wire.Packet, error) { return s.s.ReadBy(deadline) }

// Close closes the connection.
func (s *StreamConn) Close() error { return s.s.Close() }

// Result is what a child wrote for one call.
type Result struct {
	// Frames are the provider frames in order, the terminal last.
	Frames []frame.Frame
	// Terminal is the provider terminal, or nil when none came.
	Terminal *frame.Frame
	// End reports whether the call's end arrived.
	End bool
}

// Chunks returns the chunk frames.
func (r *Result) Chunks() []frame.Frame { return (*testnet.Result)(r).Chunks() }

// ErrProviderRules is matched by ReadCall's errors for output that breaks
// the provider rules (the sequence fence, an end before the terminal,
// another call's end, a packet that is no frame or end).
var ErrProviderRules = errors.New("skulktest: provider broke the rules")

// ReadCall reads callID's provider frames through a fence (sequences from 1,
// one terminal) until its end, until deadline (zero for Timeout from now).
// It returns what it read so far with an error when the connection fails or
// the deadline passes, and an error matching ErrProviderRules when the
// child breaks the rules.
func (s *StreamConn) ReadCall(callID string, deadline time.Time) (*Result, error) {
	res, err := s.s.ReadCall(callID, deadline)
	return (*Result)(res), err
}
