package testnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/sequence"
	"github.com/skulkrt/skulk/wire"
)

// controlQueue bounds the control packets the Host has read and not yet
// handed out. Overflow policy: block, so the Host stops reading the control
// connection (a child writes control packets only in answer to the host, so
// a test that reads its answers never fills it).
const controlQueue = 64

// Host is the host side of a child's control connection, for tests. A
// goroutine of its own reads the control connection; the methods that wait
// for packets (Hello, Ping, Next, WaitClosed) must be called by one goroutine
// at a time, the others are safe for concurrent use. Close stops it.
type Host struct {
	control     net.Conn
	streamsPath string
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
}

// NewHost starts a test host on control, whose child accepts stream
// connections at streamsPath (empty when the test dials some other way).
// The caller must call Close.
func NewHost(control net.Conn, streamsPath string) *Host {
	h := &Host{
		control: control, streamsPath: streamsPath,
		w:       wire.NewWriter(control, wire.Limits{}),
		packets: make(chan wire.Packet, controlQueue),
		done:    make(chan struct{}), stop: make(chan struct{}),
	}
	go h.read() // stopped by Close closing control
	return h
}

func (h *Host) read() {
	defer close(h.done)
	defer close(h.packets)
	r := wire.NewReader(h.control, wire.Limits{})
	for {
		p, err := r.ReadPacket()
		if err != nil {
			h.readErr = err
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

// ErrControlClosed is returned by the waiting methods once the control
// connection reached EOF or failed; it wraps the read error.
var ErrControlClosed = errors.New("testnet: control connection closed")

// Next returns the next control packet the child wrote.
func (h *Host) Next(ctx context.Context) (wire.Packet, error) {
	h.mu.Lock()
	if len(h.pending) > 0 {
		p := h.pending[0]
		h.pending = h.pending[1:]
		h.mu.Unlock()
		return p, nil
	}
	h.mu.Unlock()
	select {
	case p, ok := <-h.packets:
		if !ok {
			return nil, fmt.Errorf("%w: %w", ErrControlClosed, h.readErr)
		}
		return p, nil
	case <-ctx.Done():
		return nil, ctx.Err()
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
		return nil, fmt.Errorf("testnet: want hello, got %s", p.Type())
	}
	return hello, nil
}

// DefaultStartup is the startup Handshake sends when given nil: protocol
// wire.ProtocolVersion, default limits, cancel grace 1 s.
func DefaultStartup() *wire.Startup {
	return &wire.Startup{Protocol: wire.ProtocolVersion, ChildID: "test", Limits: wire.DefaultLimits(),
		HealthIntervalMS: 1000, CancelGraceMS: 1000, IngressQueue: wire.IngressQueue}
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
// written.
func (h *Host) Write(p wire.Packet) error { return h.w.WritePacket(p) }

// WriteRaw writes b on the control connection as it is, after everything
// written before it: for packets the wire package would not encode.
func (h *Host) WriteRaw(b []byte) error {
	_, err := h.control.Write(b)
	return err
}

// Ping sends a ping and waits for the pong with its nonce; other packets
// read meanwhile are kept for Next. It returns the pong and the round trip.
func (h *Host) Ping(ctx context.Context, nonce uint64) (*wire.Pong, time.Duration, error) {
	start := time.Now()
	if err := h.Write(&wire.Ping{Nonce: nonce}); err != nil {
		return nil, 0, err
	}
	for {
		select {
		case p, ok := <-h.packets:
			if !ok {
				return nil, 0, fmt.Errorf("%w: %w", ErrControlClosed, h.readErr)
			}
			if pong, ok := p.(*wire.Pong); ok && pong.Nonce == nonce {
				return pong, time.Since(start), nil
			}
			h.mu.Lock()
			h.pending = append(h.pending, p)
			h.mu.Unlock()
		case <-ctx.Done():
			return nil, 0, ctx.Err()
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

// WaitBye waits for the child's bye.
func (h *Host) WaitBye(ctx context.Context) (*wire.Bye, error) {
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
	for {
		if _, err := h.Next(ctx); err != nil {
			if errors.Is(err, ErrControlClosed) {
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
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", h.streamsPath)
	if err != nil {
		return nil, fmt.Errorf("testnet: dial: %w", err)
	}
	return NewStream(c.(*net.UnixConn)), nil
}

// Stream is the host side of one stream connection. Writes are synchronous
// (a blocked write is visible to the test) and safe for concurrent use;
// reads are for one goroutine at a time.
type Stream struct {
	Conn *net.UnixConn
	r    *wire.Reader
	wmu  sync.Mutex
}

// NewStream wraps a connected stream connection.
func NewStream(c *net.UnixConn) *Stream {
	return &Stream{Conn: c, r: wire.NewReader(c, wire.Limits{})}
}

// WriteRaw writes bytes as they are.
func (s *Stream) WriteRaw(b []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, err := s.Conn.Write(b)
	return err
}

// Write encodes p and writes it, returning when the kernel took every byte.
func (s *Stream) Write(p wire.Packet) error {
	b, err := wire.Encode(p, wire.Limits{})
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

// Caller writes the caller frame f (direction and call id as given).
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

// Read reads the next packet the child wrote.
func (s *Stream) Read() (wire.Packet, error) { return s.r.ReadPacket() }

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
// the provider rules (fence, end before the terminal, another call's end).
var ErrProviderRules = errors.New("testnet: provider broke the rules")

// ReadCall reads callID's provider frames through a fence (sequences from 1,
// one terminal) until its end, within deadline (zero for none). It returns
// what it read so far with an error when the connection fails or the
// deadline passes, and an error matching ErrProviderRules when the child
// breaks the rules.
func (s *Stream) ReadCall(callID string, deadline time.Time) (*Result, error) {
	s.Conn.SetReadDeadline(deadline)
	defer s.Conn.SetReadDeadline(time.Time{})
	fence := sequence.New(callID, frame.ProviderToCaller, 1)
	res := &Result{}
	for {
		p, err := s.Read()
		if err != nil {
			return res, err
		}
		switch p := p.(type) {
		case *wire.Frame:
			if err := fence.Accept(&p.Frame); err != nil {
				return res, fmt.Errorf("%w: %w", ErrProviderRules, err)
			}
			res.Frames = append(res.Frames, p.Frame)
			if p.IsTerminal() {
				res.Terminal = &res.Frames[len(res.Frames)-1]
			}
		case *wire.End:
			if p.CallID != callID || res.Terminal == nil {
				return res, fmt.Errorf("%w: end of %q before the terminal", ErrProviderRules, p.CallID)
			}
			res.End = true
			return res, nil
		default:
			return res, fmt.Errorf("%w: unexpected %s", ErrProviderRules, p.Type())
		}
	}
}
