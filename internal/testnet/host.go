package testnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/internal/sequence"
	"github.com/skulkrt/skulk/wire"
)

// controlQueue bounds the control packets the Host has read and not yet
// handed out. Overflow policy: block, so the Host stops reading the control
// connection (a child writes control packets only in answer to the host, so
// a test that reads its answers never fills it).
const controlQueue = 64

// Config is how a Host and its Streams wait and name their errors. The
// zero Config is testnet's own: no bound on a wait, errors named
// "testnet". Package skulktest's Peer and Stream are a Host and a Stream
// with skulktest's Config.
type Config struct {
	// Timeout bounds a wait whose context has no deadline, a Stream's Read
	// and a ReadCall given no deadline; 0 for no bound.
	Timeout time.Duration
	// Name starts the messages of errors made here; "testnet" when empty.
	Name string
	// ErrControlClosed, ErrUnexpected and ErrProviderRules are the
	// sentinels the errors wrap; the package's own when nil.
	ErrControlClosed, ErrUnexpected, ErrProviderRules error
}

// withDefaults fills in the zero fields but Timeout.
func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = "testnet"
	}
	if c.ErrControlClosed == nil {
		c.ErrControlClosed = ErrControlClosed
	}
	if c.ErrUnexpected == nil {
		c.ErrUnexpected = ErrUnexpected
	}
	if c.ErrProviderRules == nil {
		c.ErrProviderRules = ErrProviderRules
	}
	return c
}

// bound gives ctx a deadline of c.Timeout from now when it has none and
// c.Timeout is set.
func (c Config) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || c.Timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.Timeout)
}

// Host is the host side of a child's control connection, for tests. A
// goroutine of its own reads the control connection; the methods that wait
// for packets (Next, Hello, Handshake, Ping, WaitBye, WaitClosed) must be
// called by one goroutine at a time, the others are safe for concurrent
// use. Close stops it.
type Host struct {
	control     net.Conn
	streamsPath string
	wmu         sync.Mutex // held by a write, which may set control's write deadline
	w           func(wire.Packet) error
	cfg         Config
	offered     atomic.Bool // a startup with ToolsUpdates was written: tools packets are the child's to send

	packets chan wire.Packet // control packets read; see controlQueue
	readErr error            // why reading stopped; set before packets is closed
	done    chan struct{}    // closed when the reader returned
	stop    chan struct{}    // closed by Close

	mu sync.Mutex // guards pending
	// pending holds the packets Ping read while waiting for its pong, kept
	// for Next. Bound: besides one hello and one bye, a child writes only
	// pongs, one per ping the test sent, and tools packets once offered,
	// as many as the test has it send.
	pending  []wire.Packet
	closeOne sync.Once
}

// NewHost starts a test host on control, whose child accepts stream
// connections at streamsPath (empty when the test dials some other way).
// The caller must call Close.
func NewHost(control net.Conn, streamsPath string) *Host {
	return NewHostConfig(control, streamsPath, Config{})
}

// NewHostConfig is NewHost with cfg.
func NewHostConfig(control net.Conn, streamsPath string, cfg Config) *Host {
	h := &Host{
		control: control, streamsPath: streamsPath, cfg: cfg.withDefaults(),
		w:       func(p wire.Packet) error { return packetio.WritePacket(control, p, wire.Limits{}) },
		packets: make(chan wire.Packet, controlQueue),
		done:    make(chan struct{}), stop: make(chan struct{}),
	}
	go h.read() // stopped by Close closing control
	return h
}

func (h *Host) read() {
	defer close(h.done)
	defer close(h.packets)
	r := packetio.NewReader(h.control, wire.Limits{})
	for {
		p, err := r.ReadPacket()
		if err != nil {
			h.readErr = err
			return
		}
		if _, ok := p.(*wire.Tools); ok && !h.offered.Load() {
			// A protocol error (docs/protocol.md §3, tools): the connection
			// is not read any further.
			h.readErr = fmt.Errorf("%s: tools packet without tools_updates in startup: %w", h.cfg.Name, wire.ErrProtocol)
			return
		}
		select {
		case h.packets <- p:
		case <-h.stop:
			h.readErr = net.ErrClosed
			return
		}
	}
}

// Errors of a Host's waits and a Stream's ReadCall (for the zero Config);
// match them with errors.Is.
var (
	// ErrControlClosed: the control connection reached EOF or failed; the
	// error wraps the read error.
	ErrControlClosed = errors.New("testnet: control connection closed")
	// ErrUnexpected: the child wrote another packet than the one waited
	// for.
	ErrUnexpected = errors.New("testnet: unexpected packet")
	// ErrProviderRules: ReadCall read output that breaks the provider
	// rules (the sequence fence, an end before the terminal, another
	// call's end, a packet that is no frame or end).
	ErrProviderRules = errors.New("testnet: provider broke the rules")
)

// Next returns the next control packet the child wrote. A tools packet
// before a startup with ToolsUpdates stops the reading: Next's error then
// matches wire.ErrProtocol, and its message says so.
func (h *Host) Next(ctx context.Context) (wire.Packet, error) {
	h.mu.Lock()
	if len(h.pending) > 0 {
		p := h.pending[0]
		h.pending = h.pending[1:]
		h.mu.Unlock()
		return p, nil
	}
	h.mu.Unlock()
	ctx, cancel := h.cfg.bound(ctx)
	defer cancel()
	select {
	case p, ok := <-h.packets:
		if !ok {
			return nil, fmt.Errorf("%w: %w", h.cfg.ErrControlClosed, h.readErr)
		}
		return p, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: waiting for a control packet: %w", h.cfg.Name, ctx.Err())
	}
}

// Hello waits for the child's hello.
func (h *Host) Hello(ctx context.Context) (*wire.Hello, error) {
	p, err := h.Next(ctx)
	if err != nil {
		return nil, err
	}
	hello, ok := p.(*wire.Hello)
	if !ok {
		return nil, fmt.Errorf("%w: want hello, got %s", h.cfg.ErrUnexpected, packetio.TypeOf(p))
	}
	return hello, nil
}

// DefaultStartup returns the startup Handshake sends when given nil:
// protocol wire.ProtocolVersion, child id "test", default limits, health
// interval 1 s, cancel grace 1 s, ingress queue protocol.IngressQueue.
func DefaultStartup() *wire.Startup {
	return &wire.Startup{Protocol: wire.ProtocolVersion, ChildID: "test", Limits: packetio.DefaultLimits(),
		HealthIntervalMS: 1000, CancelGraceMS: 1000, IngressQueue: protocol.IngressQueue}
}

// Handshake waits for hello and answers with st (DefaultStartup when nil).
func (h *Host) Handshake(ctx context.Context, st *wire.Startup) (*wire.Hello, error) {
	hello, err := h.Hello(ctx)
	if err != nil {
		return nil, err
	}
	if st == nil {
		st = DefaultStartup()
	}
	if err := h.Write(st); err != nil {
		return nil, err
	}
	return hello, nil
}

// Write writes a packet on the control connection and waits until it is
// written, for at most Config.Timeout when it is set: past it (the child
// stopped reading its control connection) the error matches
// os.ErrDeadlineExceeded and the packet may have been written in part.
func (h *Host) Write(p wire.Packet) error {
	if st, ok := p.(*wire.Startup); ok && st.ToolsUpdates {
		h.offered.Store(true) // before the child can read it
	}
	h.wmu.Lock()
	defer h.wmu.Unlock()
	defer h.cfg.writeBound(h.control)()
	return h.cfg.writeError("control", h.w(p))
}

// WriteRaw writes b on the control connection as it is, after everything
// written before it: for packets the wire package would not encode. It
// waits as Write does.
func (h *Host) WriteRaw(b []byte) error {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	defer h.cfg.writeBound(h.control)()
	_, err := h.control.Write(b)
	return h.cfg.writeError("control", err)
}

// writeBound sets c's write deadline Timeout from now when Timeout is
// set, and returns what clears it again.
func (c Config) writeBound(conn net.Conn) func() {
	if c.Timeout <= 0 {
		return func() {}
	}
	conn.SetWriteDeadline(time.Now().Add(c.Timeout))
	return func() { conn.SetWriteDeadline(time.Time{}) }
}

// writeError names the connection in an error of a write whose deadline
// passed, still matching os.ErrDeadlineExceeded; other errors are
// returned as they are.
func (c Config) writeError(conn string, err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%s: %s write not taken by the child before its deadline: %w", c.Name, conn, err)
	}
	return err
}

// Ping sends a ping and waits for the pong with its nonce; other packets
// read meanwhile are kept for Next. It returns the pong and the round trip.
func (h *Host) Ping(ctx context.Context, nonce uint64) (*wire.Pong, time.Duration, error) {
	start := time.Now()
	if err := h.Write(&wire.Ping{Nonce: nonce}); err != nil {
		return nil, 0, err
	}
	ctx, cancel := h.cfg.bound(ctx)
	defer cancel()
	for {
		select {
		case p, ok := <-h.packets:
			if !ok {
				return nil, 0, fmt.Errorf("%w: %w", h.cfg.ErrControlClosed, h.readErr)
			}
			if pong, ok := p.(*wire.Pong); ok && pong.Nonce == nonce {
				return pong, time.Since(start), nil
			}
			h.mu.Lock()
			h.pending = append(h.pending, p)
			h.mu.Unlock()
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("%s: waiting for pong %d: %w", h.cfg.Name, nonce, ctx.Err())
		}
	}
}

// Cancel sends a control cancel for callID.
func (h *Host) Cancel(callID, reason string) error {
	return h.Write(&wire.Cancel{CallID: callID, Reason: reason})
}

// Drain sends drain with the given grace.
func (h *Host) Drain(grace time.Duration) error {
	return h.Write(&wire.Drain{GraceMS: grace.Milliseconds()})
}

// WaitBye waits for the child's bye, dropping other packets.
func (h *Host) WaitBye(ctx context.Context) (*wire.Bye, error) {
	ctx, cancel := h.cfg.bound(ctx)
	defer cancel()
	for {
		p, err := h.Next(ctx)
		if err != nil {
			return nil, err
		}
		if bye, ok := p.(*wire.Bye); ok {
			return bye, nil
		}
	}
}

// WaitClosed waits until the child closed the control connection, dropping
// packets read meanwhile.
func (h *Host) WaitClosed(ctx context.Context) error {
	ctx, cancel := h.cfg.bound(ctx)
	defer cancel()
	for {
		if _, err := h.Next(ctx); err != nil {
			if errors.Is(err, h.cfg.ErrControlClosed) {
				return nil
			}
			return err
		}
	}
}

// Close closes the control connection and waits for the reader.
func (h *Host) Close() error {
	h.closeOne.Do(func() {
		close(h.stop)
		h.control.Close()
	})
	<-h.done
	return nil
}

// Dial opens a new stream connection to the child.
func (h *Host) Dial(ctx context.Context) (*Stream, error) {
	ctx, cancel := h.cfg.bound(ctx)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", h.streamsPath)
	if err != nil {
		return nil, fmt.Errorf("%s: dial: %w", h.cfg.Name, err)
	}
	return NewStreamConfig(c.(*net.UnixConn), h.cfg), nil
}

// Stream is the host side of one stream connection. Writes are synchronous
// (a blocked write is visible to the test) and safe for concurrent use;
// reads are for one goroutine at a time.
type Stream struct {
	// Conn is the connection, for what the methods do not do.
	Conn *net.UnixConn
	r    *packetio.Reader
	wmu  sync.Mutex
	cfg  Config
}

// NewStream wraps a connected stream connection.
func NewStream(c *net.UnixConn) *Stream { return NewStreamConfig(c, Config{}) }

// NewStreamConfig is NewStream with cfg.
func NewStreamConfig(c *net.UnixConn, cfg Config) *Stream {
	return &Stream{Conn: c, r: packetio.NewReader(c, wire.Limits{}), cfg: cfg.withDefaults()}
}

// WriteRaw writes bytes as they are, waiting at most Config.Timeout when
// it is set (and, without it, as long as the connection's own deadline
// lets it).
func (s *Stream) WriteRaw(b []byte) error {
	if s.cfg.Timeout <= 0 {
		s.wmu.Lock()
		defer s.wmu.Unlock()
		_, err := s.Conn.Write(b)
		return err
	}
	return s.WriteRawBy(b, time.Now().Add(s.cfg.Timeout))
}

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
	return s.cfg.writeError("stream", err)
}

// Write encodes p and writes it, returning when the kernel took every byte.
func (s *Stream) Write(p wire.Packet) error {
	b, err := packetio.Encode(p, wire.Limits{})
	if err != nil {
		return err
	}
	return s.WriteRaw(b)
}

// Invoke writes an invoke of tool with args (nil for {}) and timeout.
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
	for _, p := range pkts {
		if b, _, err = wire.AppendPacket(b, p, wire.Limits{}); err != nil {
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

// Chunk writes a caller chunk.
func (s *Stream) Chunk(callID string, seq uint64, payload frame.Payload, media frame.Media) error {
	f, err := frame.NewChunk(callID, frame.CallerToProvider, seq, payload, media)
	if err != nil {
		return err
	}
	return s.Caller(f)
}

// Complete writes the caller's completed terminal.
func (s *Stream) Complete(callID string, seq uint64, result frame.Payload) error {
	f, err := frame.NewCompleted(callID, frame.CallerToProvider, seq, result)
	if err != nil {
		return err
	}
	return s.Caller(f)
}

// CancelCall writes the caller's cancelled terminal.
func (s *Stream) CancelCall(callID string, seq uint64) error {
	f, err := frame.NewCancelled(callID, frame.CallerToProvider, seq, "test cancel")
	if err != nil {
		return err
	}
	return s.Caller(f)
}

// Read reads the next packet the child wrote, waiting at most the Config's
// Timeout; with none it leaves the connection's deadline as it is.
func (s *Stream) Read() (wire.Packet, error) {
	if s.cfg.Timeout <= 0 {
		return s.r.ReadPacket()
	}
	return s.ReadBy(time.Now().Add(s.cfg.Timeout))
}

// ReadBy reads the next packet the child wrote, waiting until deadline
// (zero for no bound); past it the error matches os.ErrDeadlineExceeded.
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

// ReadCall reads callID's provider frames through a fence (sequences from 1,
// one terminal) until its end, until deadline (zero for the Config's
// Timeout from now, or no bound without one). It returns what it read so
// far with an error when the connection fails or the deadline passes, and
// an error matching ErrProviderRules when the child breaks the rules.
func (s *Stream) ReadCall(callID string, deadline time.Time) (*Result, error) {
	if deadline.IsZero() && s.cfg.Timeout > 0 {
		deadline = time.Now().Add(s.cfg.Timeout)
	}
	fence := sequence.New(callID, frame.ProviderToCaller, 1)
	res := &Result{}
	for {
		p, err := s.ReadBy(deadline)
		if err != nil {
			return res, err
		}
		switch p := p.(type) {
		case *wire.Frame:
			if err := fence.Accept(&p.Frame); err != nil {
				return res, fmt.Errorf("%w: %w", s.cfg.ErrProviderRules, err)
			}
			res.Frames = append(res.Frames, p.Frame)
			if p.Kind.IsTerminal() {
				res.Terminal = &res.Frames[len(res.Frames)-1]
			}
		case *wire.End:
			if p.CallID != callID || res.Terminal == nil {
				return res, fmt.Errorf("%w: end of %q before the terminal", s.cfg.ErrProviderRules, p.CallID)
			}
			res.End = true
			return res, nil
		default:
			return res, fmt.Errorf("%w: unexpected %s", s.cfg.ErrProviderRules, packetio.TypeOf(p))
		}
	}
}
