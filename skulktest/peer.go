package skulktest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/sockpair"
	"github.com/skulkrt/skulk/sequence"
	"github.com/skulkrt/skulk/wire"
)

// controlQueue bounds the control packets a Peer has read and not yet
// handed out. Overflow policy: block, so the Peer stops reading the control
// connection (a child writes control packets only in answer to the host, so
// a test that reads its answers never fills it).
const controlQueue = 64

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
	control     net.Conn
	streamsPath string
	wmu         sync.Mutex // held by a write, which sets control's write deadline
	w           *wire.Writer

	packets chan wire.Packet // control packets read; see controlQueue
	readErr error            // why reading stopped; set before packets is closed
	done    chan struct{}    // closed when the reader returned
	stop    chan struct{}    // closed by Close

	mu sync.Mutex // guards pending
	// pending holds the packets Ping read while waiting for its pong, kept
	// for Next. Bound: besides one hello and one bye, a child writes only
	// pongs, one per ping the test sent.
	pending  []wire.Packet
	closeOne sync.Once

	// exited is closed once the child is over: its process was waited for
	// (cmd, waitErr) or its Serve returned (serveErr). nil for NewPeer.
	exited   chan struct{}
	cmd      *exec.Cmd
	waitErr  error
	serveErr error
	out      *buffer
}

// NewPeer starts a Peer on control, the host's end of a child's control
// connection, whose child accepts stream connections at streamsPath (empty
// when the test dials some other way). The caller must call Close. Most
// tests use ServePeer or ExecPeer, which also start the child.
func NewPeer(control net.Conn, streamsPath string) *Peer {
	p := &Peer{
		control: control, streamsPath: streamsPath,
		w:       wire.NewWriter(control, wire.Limits{}),
		packets: make(chan wire.Packet, controlQueue),
		done:    make(chan struct{}), stop: make(chan struct{}),
	}
	go p.read() // stopped by Close closing control
	return p
}

// ServePeer serves opts with child.Serve in the test's process, on a
// socketpair for the control connection and a listener at streams.sock in
// a fresh 0700 directory, and returns a Peer on the other end. The child
// has not been sent startup: call Handshake. When the test ends the Peer
// is closed and ServePeer waits for Serve to return (failing the test if
// it does not within Timeout).
func ServePeer(t testing.TB, opts child.Options) *Peer {
	t.Helper()
	dir := privateDir(t)
	path := filepath.Join(dir, "streams.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	hostEnd, childEnd, err := socketPair()
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
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
// (PROTOCOL.md §1): fd 3 its end of a control socketpair, fd 4 a listener at
// streams.sock in a fresh 0700 directory, stdin /dev/null, stdout and
// stderr collected (Output), in a process group of its own, with the
// SKULK_* environment (child id "test"), PATH, HOME and env. It returns a
// Peer on the host's end; the child has not been sent startup: call
// Handshake. When the test ends the process group is killed and the
// process waited for.
func ExecPeer(t testing.TB, bin string, args []string, env ...string) *Peer {
	t.Helper()
	path := filepath.Join(privateDir(t), "streams.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false) // the child's fd 4 keeps listening at path
	lnFile, err := ln.File()
	ln.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer lnFile.Close()
	hostEnd, childFile, err := socketPairFiles()
	if err != nil {
		t.Fatal(err)
	}
	defer childFile.Close()
	out := &buffer{}
	cmd := exec.Command(bin, args...)
	cmd.ExtraFiles = []*os.File{childFile, lnFile} // fd 3, fd 4
	cmd.Env = append([]string{
		child.EnvProtocol + "=1", child.EnvControlFD + "=3", child.EnvStreamsFD + "=4", child.EnvChildID + "=test",
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
	}, env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = time.Second // bounds Wait should a grandchild keep the output open
	if err := cmd.Start(); err != nil {
		hostEnd.Close()
		t.Fatal(err)
	}
	control, err := fileConn(hostEnd)
	if err != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		t.Fatal(err)
	}
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

func (p *Peer) read() {
	defer close(p.done)
	defer close(p.packets)
	r := wire.NewReader(p.control, wire.Limits{})
	for {
		pk, err := r.ReadPacket()
		if err != nil {
			p.readErr = err
			return
		}
		select {
		case p.packets <- pk:
		case <-p.stop:
			p.readErr = net.ErrClosed
			return
		}
	}
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

// Next returns the next control packet the child wrote.
func (p *Peer) Next(ctx context.Context) (wire.Packet, error) {
	p.mu.Lock()
	if len(p.pending) > 0 {
		pk := p.pending[0]
		p.pending = p.pending[1:]
		p.mu.Unlock()
		return pk, nil
	}
	p.mu.Unlock()
	ctx, cancel := bound(ctx)
	defer cancel()
	select {
	case pk, ok := <-p.packets:
		if !ok {
			return nil, fmt.Errorf("%w: %w", ErrControlClosed, p.readErr)
		}
		return pk, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("skulktest: waiting for a control packet: %w", ctx.Err())
	}
}

// Hello waits for the child's hello.
func (p *Peer) Hello(ctx context.Context) (*wire.Hello, error) {
	pk, err := p.Next(ctx)
	if err != nil {
		return nil, err
	}
	hello, ok := pk.(*wire.Hello)
	if !ok {
		return nil, fmt.Errorf("%w: want hello, got %s", ErrUnexpected, pk.Type())
	}
	return hello, nil
}

// DefaultStartup returns the startup Handshake sends when given nil:
// protocol wire.ProtocolVersion, child id "test", default limits, health
// interval 1 s, cancel grace 1 s, ingress queue wire.IngressQueue.
func DefaultStartup() *wire.Startup {
	return &wire.Startup{Protocol: wire.ProtocolVersion, ChildID: "test", Limits: wire.DefaultLimits(),
		HealthIntervalMS: 1000, CancelGraceMS: 1000, IngressQueue: wire.IngressQueue}
}

// Handshake waits for hello and answers with st (DefaultStartup when nil).
func (p *Peer) Handshake(ctx context.Context, st *wire.Startup) (*wire.Hello, error) {
	hello, err := p.Hello(ctx)
	if err != nil {
		return nil, err
	}
	if st == nil {
		st = DefaultStartup()
	}
	if err := p.Write(st); err != nil {
		return nil, err
	}
	return hello, nil
}

// Write writes a packet on the control connection and waits until it is
// written, for at most Timeout: past it (the child stopped reading its
// control connection) the error matches os.ErrDeadlineExceeded and the
// packet may have been written in part.
func (p *Peer) Write(pk wire.Packet) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.control.SetWriteDeadline(time.Now().Add(Timeout))
	defer p.control.SetWriteDeadline(time.Time{})
	return writeError("control", p.w.WritePacket(pk))
}

// WriteRaw writes b on the control connection as it is, after everything
// written before it: for packets the wire package would not encode. It
// waits as Write does.
func (p *Peer) WriteRaw(b []byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.control.SetWriteDeadline(time.Now().Add(Timeout))
	defer p.control.SetWriteDeadline(time.Time{})
	_, err := p.control.Write(b)
	return writeError("control", err)
}

// writeError names the connection in an error of a write whose deadline
// passed, still matching os.ErrDeadlineExceeded; other errors are
// returned as they are.
func writeError(conn string, err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("skulktest: %s write not taken by the child before its deadline: %w", conn, err)
	}
	return err
}

// Ping sends a ping and waits for the pong with its nonce; other packets
// read meanwhile are kept for Next. It returns the pong and the round trip.
func (p *Peer) Ping(ctx context.Context, nonce uint64) (*wire.Pong, time.Duration, error) {
	start := time.Now()
	if err := p.Write(&wire.Ping{Nonce: nonce}); err != nil {
		return nil, 0, err
	}
	ctx, cancel := bound(ctx)
	defer cancel()
	for {
		select {
		case pk, ok := <-p.packets:
			if !ok {
				return nil, 0, fmt.Errorf("%w: %w", ErrControlClosed, p.readErr)
			}
			if pong, ok := pk.(*wire.Pong); ok && pong.Nonce == nonce {
				return pong, time.Since(start), nil
			}
			p.mu.Lock()
			p.pending = append(p.pending, pk)
			p.mu.Unlock()
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("skulktest: waiting for pong %d: %w", nonce, ctx.Err())
		}
	}
}

// Cancel sends a control cancel for callID.
func (p *Peer) Cancel(callID, reason string) error {
	return p.Write(&wire.Cancel{CallID: callID, Reason: reason})
}

// Drain sends drain with the given grace.
func (p *Peer) Drain(grace time.Duration) error {
	return p.Write(&wire.Drain{GraceMS: grace.Milliseconds()})
}

// WaitBye waits for the child's bye, dropping other packets.
func (p *Peer) WaitBye(ctx context.Context) (*wire.Bye, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	for {
		pk, err := p.Next(ctx)
		if err != nil {
			return nil, err
		}
		if bye, ok := pk.(*wire.Bye); ok {
			return bye, nil
		}
	}
}

// WaitClosed waits until the child closed the control connection, dropping
// packets read meanwhile.
func (p *Peer) WaitClosed(ctx context.Context) error {
	ctx, cancel := bound(ctx)
	defer cancel()
	for {
		if _, err := p.Next(ctx); err != nil {
			if errors.Is(err, ErrControlClosed) {
				return nil
			}
			return err
		}
	}
}

// Close closes the control connection (the child sees the host go away)
// and waits for the Peer's reader. It does not stop the child.
func (p *Peer) Close() error {
	p.closeOne.Do(func() {
		close(p.stop)
		p.control.Close()
	})
	<-p.done
	return nil
}

// Dial opens a new stream connection to the child.
func (p *Peer) Dial(ctx context.Context) (*Stream, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", p.streamsPath)
	if err != nil {
		return nil, fmt.Errorf("skulktest: dial: %w", err)
	}
	return NewStream(c.(*net.UnixConn)), nil
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

// Stream is the host side of one stream connection. Writes are synchronous
// (a blocked write is visible to the test) and safe for concurrent use;
// reads are for one goroutine at a time. A Stream nobody reads is a host
// that stopped reading: the child's writes fill the socket and block. A
// child that stops reading does the same to the Stream's writes, and each
// write waits until its deadline: WriteRawBy's, Timeout from the call for
// the others.
type Stream struct {
	// Conn is the connection, for what the methods do not do (CloseWrite,
	// SetReadBuffer). The methods set its read and write deadlines for
	// each read and write and clear them afterwards.
	Conn *net.UnixConn
	r    *wire.Reader
	wmu  sync.Mutex
}

// NewStream wraps a connected stream connection.
func NewStream(c *net.UnixConn) *Stream {
	return &Stream{Conn: c, r: wire.NewReader(c, wire.Limits{})}
}

// WriteRaw writes bytes as they are, waiting at most Timeout.
func (s *Stream) WriteRaw(b []byte) error { return s.WriteRawBy(b, time.Now().Add(Timeout)) }

// WriteRawBy writes bytes as they are, waiting until deadline for the
// kernel to take every byte; past it (the child stopped reading) the error
// matches os.ErrDeadlineExceeded and b may have been written in part, so
// the connection is good only for closing.
func (s *Stream) WriteRawBy(b []byte, deadline time.Time) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.Conn.SetWriteDeadline(deadline)
	defer s.Conn.SetWriteDeadline(time.Time{})
	_, err := s.Conn.Write(b)
	return writeError("stream", err)
}

// Write encodes pk and writes it, returning when the kernel took every
// byte, waiting at most Timeout.
func (s *Stream) Write(pk wire.Packet) error {
	b, err := wire.Encode(pk, wire.Limits{})
	if err != nil {
		return err
	}
	return s.WriteRaw(b)
}

// Invoke writes an invoke of tool with args (nil for {}) and timeout (0 for
// none).
func (s *Stream) Invoke(callID, tool string, args map[string]any, timeout time.Duration) error {
	if args == nil {
		args = map[string]any{}
	}
	pl, err := frame.PayloadOf(args)
	if err != nil {
		return err
	}
	return s.Write(&wire.Invoke{CallID: callID, ToolID: tool, Arguments: pl, TimeoutMS: timeout.Milliseconds()})
}

// Request writes a whole call's caller side in one write: the invoke of
// tool with args (nil for {}, no timeout), the caller's started, one chunk
// per payload and the caller's completed. A child reads it as one request
// whose input is over before its handler starts.
func (s *Stream) Request(callID, tool string, args map[string]any, chunks ...frame.Payload) error {
	if args == nil {
		args = map[string]any{}
	}
	pl, err := frame.PayloadOf(args)
	if err != nil {
		return err
	}
	pkts := []wire.Packet{&wire.Invoke{CallID: callID, ToolID: tool, Arguments: pl}}
	started, err := frame.NewStarted(callID, frame.CallerToProvider)
	if err != nil {
		return err
	}
	pkts = append(pkts, &wire.Frame{Frame: started})
	for i, c := range chunks {
		f, err := frame.NewChunk(callID, frame.CallerToProvider, uint64(i+1), c, nil)
		if err != nil {
			return err
		}
		pkts = append(pkts, &wire.Frame{Frame: f})
	}
	done, err := frame.NewCompleted(callID, frame.CallerToProvider, uint64(len(chunks)+1), nil)
	if err != nil {
		return err
	}
	pkts = append(pkts, &wire.Frame{Frame: done})
	var b []byte
	for _, pk := range pkts {
		if b, _, err = wire.AppendPacket(b, pk, wire.Limits{}); err != nil {
			return err
		}
	}
	return s.WriteRaw(b)
}

// Caller writes the caller frame f as it is (direction, call id and
// sequence as given: a gap, a replay, a second terminal are the test's to
// choose).
func (s *Stream) Caller(f frame.Frame) error { return s.Write(&wire.Frame{Frame: f}) }

// Started writes the caller's started frame.
func (s *Stream) Started(callID string) error {
	f, err := frame.NewStarted(callID, frame.CallerToProvider)
	if err != nil {
		return err
	}
	return s.Caller(f)
}

// Chunk writes a caller chunk with sequence seq.
func (s *Stream) Chunk(callID string, seq uint64, payload frame.Payload, media frame.Media) error {
	f, err := frame.NewChunk(callID, frame.CallerToProvider, seq, payload, media)
	if err != nil {
		return err
	}
	return s.Caller(f)
}

// Complete writes the caller's completed terminal with sequence seq.
func (s *Stream) Complete(callID string, seq uint64, result frame.Payload) error {
	f, err := frame.NewCompleted(callID, frame.CallerToProvider, seq, result)
	if err != nil {
		return err
	}
	return s.Caller(f)
}

// CancelCall writes the caller's cancelled terminal with sequence seq.
func (s *Stream) CancelCall(callID string, seq uint64) error {
	f, err := frame.NewCancelled(callID, frame.CallerToProvider, seq, "test cancel")
	if err != nil {
		return err
	}
	return s.Caller(f)
}

// Read reads the next packet the child wrote, waiting at most Timeout.
func (s *Stream) Read() (wire.Packet, error) { return s.ReadBy(time.Now().Add(Timeout)) }

// ReadBy reads the next packet the child wrote, waiting until deadline;
// past it the error matches os.ErrDeadlineExceeded.
func (s *Stream) ReadBy(deadline time.Time) (wire.Packet, error) {
	s.Conn.SetReadDeadline(deadline)
	defer s.Conn.SetReadDeadline(time.Time{})
	return s.r.ReadPacket()
}

// Close closes the connection.
func (s *Stream) Close() error { return s.Conn.Close() }

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
func (r *Result) Chunks() []frame.Frame {
	out := make([]frame.Frame, 0, len(r.Frames))
	for _, f := range r.Frames {
		if f.Kind == frame.KindChunk {
			out = append(out, f)
		}
	}
	return out
}

// ErrProviderRules is matched by ReadCall's errors for output that breaks
// the provider rules (the sequence fence, an end before the terminal,
// another call's end, a packet that is no frame or end).
var ErrProviderRules = errors.New("skulktest: provider broke the rules")

// ReadCall reads callID's provider frames through a fence (sequences from 1,
// one terminal) until its end, until deadline (zero for Timeout from now).
// It returns what it read so far with an error when the connection fails or
// the deadline passes, and an error matching ErrProviderRules when the
// child breaks the rules.
func (s *Stream) ReadCall(callID string, deadline time.Time) (*Result, error) {
	if deadline.IsZero() {
		deadline = time.Now().Add(Timeout)
	}
	fence := sequence.New(callID, frame.ProviderToCaller, 1)
	res := &Result{}
	for {
		pk, err := s.ReadBy(deadline)
		if err != nil {
			return res, err
		}
		switch pk := pk.(type) {
		case *wire.Frame:
			if err := fence.Accept(&pk.Frame); err != nil {
				return res, fmt.Errorf("%w: %w", ErrProviderRules, err)
			}
			res.Frames = append(res.Frames, pk.Frame)
			if pk.IsTerminal() {
				res.Terminal = &res.Frames[len(res.Frames)-1]
			}
		case *wire.End:
			if pk.CallID != callID || res.Terminal == nil {
				return res, fmt.Errorf("%w: end of %q before the terminal", ErrProviderRules, pk.CallID)
			}
			res.End = true
			return res, nil
		default:
			return res, fmt.Errorf("%w: unexpected %s", ErrProviderRules, pk.Type())
		}
	}
}

// privateDir returns a fresh directory of mode 0700 with a short path (a
// socket path in it fits sun_path), removed when the test ends.
func privateDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "skp")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// socketPairFiles returns the two ends of a connected AF_UNIX SOCK_STREAM
// socketpair as files (close-on-exec; exec.Cmd.ExtraFiles clears that for
// the files it passes).
func socketPairFiles() (*os.File, *os.File, error) {
	a, b, err := sockpair.Files("socketpair-a", "socketpair-b")
	if err != nil {
		return nil, nil, fmt.Errorf("skulktest: %w", err)
	}
	return a, b, nil
}

func socketPair() (*net.UnixConn, *net.UnixConn, error) {
	fa, fb, err := socketPairFiles()
	if err != nil {
		return nil, nil, err
	}
	a, err := fileConn(fa)
	if err != nil {
		fb.Close()
		return nil, nil, err
	}
	b, err := fileConn(fb)
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}

// fileConn turns a socket file into a *net.UnixConn and closes the file.
func fileConn(f *os.File) (*net.UnixConn, error) {
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("skulktest: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, errors.New("skulktest: not a Unix socket")
	}
	return uc, nil
}
