package child_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skulkrt/skulk/child"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/skulktest"
	"github.com/skulkrt/skulk/wire"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestDrainedChildLeavesNothing: after a drain, Serve has returned, every
// connection it had is closed, and no goroutine of it is left.
func TestDrainedChildLeavesNothing(t *testing.T) {
	before := goleak.IgnoreCurrent()
	srv := serveChild(t, config{}, demoOptions())
	_, err := srv.host.Handshake(ctxT(t), nil)
	require.NoError(t, err)
	var streams []*skulktest.StreamConn
	for range 3 { // idle connections
		streams = append(streams, dial(t, srv.host))
	}
	used := dial(t, srv.host) // a connection that served a call
	begin(t, used, "n1", "count", map[string]any{"n": 3})
	require.NoError(t, used.Complete("n1", 1, nil))
	requireTerminal(t, readCall(t, used, "n1"), frame.KindCompleted, 0)
	running := dial(t, srv.host) // a call cancelled by the drain
	beginSleep(t, srv.host, running, "n2")
	streams = append(streams, used, running)

	require.NoError(t, srv.host.Drain(50*time.Millisecond))
	requireTerminal(t, readCall(t, running, "n2"), frame.KindCancelled, 0)
	_, err = srv.host.WaitBye(ctxT(t))
	require.NoError(t, err)
	require.NoError(t, srv.result(t))
	require.NoError(t, srv.host.WaitClosed(ctxT(t)))
	for _, s := range streams {
		requireClosed(t, s)
	}
	// The listener is closed too: nobody accepts any more.
	_, err = srv.host.Dial(ctxT(t))
	require.Error(t, err)
	srv.host.Close()
	goleak.VerifyNone(t, before)
}

// TestDrainPastGraceSendsQueuedTerminals: when a drain's time is up while
// a call's terminal is still in the child's Writer (the host has not taken
// the bytes yet), the child gets it out, within its deadline, before it
// closes the connection: the terminal a stuck handler got after its grace
// (its end withheld), and the terminal and end of a handler that returned
// late, whose runner is still writing them. Before, abandon found the
// terminal claimed and returned, bye was written and the connection closed
// under the terminal: the host got none (seen once as a
// TestDrainPastGrace/binary failure, where the grace timer and the drain's
// deadline fire together).
func TestDrainPastGraceSendsQueuedTerminals(t *testing.T) {
	st := skulktest.DefaultStartup()
	st.CancelGraceMS = 100
	release := newGate()
	defer release.open()
	stubborn := child.Tool{ID: "stubborn", Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
		<-release.ch
		return nil, nil
	}}
	cfg := config{startup: st, extra: []child.Tool{stubborn}, listen: holdWrites}
	t.Run("stuck", func(t *testing.T) {
		h, _ := startServe(t, cfg)
		s := dial(t, h)
		begin(t, s, "hq1", "stubborn", nil)
		pingUntil(t, h, func(p *wire.Pong) bool { return p.Streams == 1 })
		// Cancelled, the handler goes on: after the grace it is stuck and
		// its terminal is written for it, into a Writer the connection
		// does not empty yet.
		require.NoError(t, h.Cancel("hq1", "test"))
		pingUntil(t, h, func(p *wire.Pong) bool { return p.Stuck == 1 })
		// The drain's time is up at 50 ms + the cancel grace: the stuck
		// call is abandoned, bye written, the connection closed.
		require.NoError(t, h.Drain(50*time.Millisecond))
		_, err := h.WaitBye(ctxT(t))
		require.NoError(t, err)
		res, _ := s.ReadCall("hq1", deadline()) // ends at EOF: the end is withheld
		requireTerminal(t, res, frame.KindCancelled, frame.CodeCancelled)
		require.False(t, res.End, "end of a handler that has not returned")
		require.NoError(t, h.WaitClosed(ctxT(t)))
	})
	t.Run("returned", func(t *testing.T) {
		h, _ := startServe(t, cfg)
		s := dial(t, h)
		begin(t, s, "hq2", "sleep", map[string]any{"ms": 60_000})
		pingUntil(t, h, func(p *wire.Pong) bool { return p.Streams == 1 })
		// At 50 ms the drain cancels the handler, which returns at once;
		// its runner writes the terminal and the end and waits for them
		// to go out, so the call stays in the table until the drain's
		// time is up.
		require.NoError(t, h.Drain(50*time.Millisecond))
		_, err := h.WaitBye(ctxT(t))
		require.NoError(t, err)
		requireTerminal(t, readCall(t, s, "hq2"), frame.KindCancelled, frame.CodeCancelled)
		require.NoError(t, h.WaitClosed(ctxT(t)))
	})
}

// holdWrites wraps a stream listener so that the child's writes on every
// connection it accepts wait until the child sets a write deadline on that
// connection or closes it: a host that takes the child's bytes only once
// the child has begun to give up on the connection. The child sets one
// only when it releases a connection or a drain abandons its call.
func holdWrites(ln child.Listener) child.Listener { return heldListener{ln} }

type heldListener struct{ child.Listener }

func (l heldListener) Accept() (child.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &heldConn{Conn: nc, held: make(chan struct{})}, nil
}

// heldConn is a connection whose writes wait for held to be closed.
type heldConn struct {
	child.Conn
	once sync.Once
	held chan struct{} // closed by SetWriteDeadline or Close
}

func (c *heldConn) let() { c.once.Do(func() { close(c.held) }) }

func (c *heldConn) Write(p []byte) (int, error) {
	<-c.held
	return c.Conn.Write(p)
}

func (c *heldConn) SetWriteDeadline(t time.Time) error {
	err := c.Conn.SetWriteDeadline(t)
	c.let()
	return err
}

// Close closes the connection first, so that a held write fails rather
// than slip out before it.
func (c *heldConn) Close() error {
	err := c.Conn.Close()
	c.let()
	return err
}

// gateListener wraps a stream listener so that writes on every connection
// it accepts wait until the test closes open (a host that stops reading,
// and reads again), each first saying so on waiting.
type gateListener struct {
	child.Listener
	open, waiting chan struct{}
}

func (l gateListener) Accept() (child.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return gatedConn{nc, l}, nil
}

type gatedConn struct {
	child.Conn
	l gateListener
}

func (c gatedConn) Write(p []byte) (int, error) {
	select {
	case c.l.waiting <- struct{}{}:
	default:
	}
	<-c.l.open
	return c.Conn.Write(p)
}

// TestTerminalAfterFullQueue: a handler that returns while its output
// queue is full (the host not reading) still gets its terminal before its
// end, once the host reads again. The runner writes the terminal with the
// handler's context already done; it must wait for room, not give up and
// leave the end to go out alone.
func TestTerminalAfterFullQueue(t *testing.T) {
	gate := gateListener{open: make(chan struct{}), waiting: make(chan struct{}, 1)}
	pad := strings.Repeat("p", 40_000) // two of them fill the 64 KiB queue
	tool := child.Tool{ID: "fill", Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
		for i := range 3 {
			if err := s.Send(frame.MustPayload(map[string]any{"i": i, "pad": pad}), nil); err != nil {
				return nil, err
			}
			if i == 0 { // the first chunk is being written, and held
				select {
				case <-gate.waiting:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
		}
		// The other two wait in the queue, at its bound.
		return frame.MustPayload(map[string]any{"n": 3}), nil
	}}
	var once sync.Once
	release := func() { once.Do(func() { close(gate.open) }) }
	defer release()
	cfg := config{extra: []child.Tool{tool}, listen: func(ln child.Listener) child.Listener {
		gate.Listener = ln
		return gate
	}}
	h, _ := startServe(t, cfg)
	s := dial(t, h)
	// Not a plain request: the runner writes its frames.
	begin(t, s, "tf1", "fill", nil)
	// The handler returned, its last two chunks queued.
	pingUntil(t, h, func(p *wire.Pong) bool { return p.Streams == 0 })
	release()
	res := readCall(t, s, "tf1")
	require.Len(t, res.Chunks(), 3)
	requireTerminal(t, res, frame.KindCompleted, 0)
}
