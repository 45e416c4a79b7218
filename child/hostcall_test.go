package child_test

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/skulktest"
	"github.com/skulkrt/skulk/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A provider's calls through a host that misbehaves on the call socket
// (docs/protocol.md §8): the SDK refuses locally what the offer rules out
// (a tool not offered, the depth), and a host that answers garbage or
// closes the connection gives the handler a synthetic CallError; the
// handler's own call goes on.
func TestCallThroughMisbehavingHost(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "calls.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	hostDone := make(chan struct{})
	go func() { // the host's side: stopped by the two connections' ends; waited for below
		defer close(hostDone)
		defer ln.Close() // later calls cannot dial
		for i := range 2 {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			r := packetio.NewReader(nc, packetio.DefaultLimits())
			if _, err := r.ReadPacket(); err != nil { // the invoke
				nc.Close()
				return
			}
			if i == 0 {
				nc.Write([]byte{0, 0, 0, 1, 0, 0, 0, 0, 0xc1}) // a header that is no map
			}
			nc.Close()
		}
	}()
	errs := make(chan error, 4) // one per s.Call below
	opts := child.Options{Tools: []child.Tool{{
		ID: "ask",
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			_, err := s.Call(ctx, "other", nil)
			errs <- err
			for _, tool := range []string{"deep", "lookup", "lookup"} {
				c, err := s.Call(ctx, tool, nil)
				if err == nil {
					_, err = c.Wait()
				}
				errs <- err
			}
			return frame.MustPayload(map[string]any{"ok": true}), nil
		},
	}}}
	srv := serveChild(t, config{}, opts)
	st := defaultStartupWithCalls(&wire.Calls{Socket: sock, MaxDepth: 1, MaxInFlight: 2,
		Tools: []wire.Tool{{ID: "lookup"}, {ID: "deep"}}})
	_, err = srv.host.Handshake(ctxT(t), st)
	require.NoError(t, err)
	s := dial(t, srv.host)
	require.NoError(t, s.Write(&wire.Invoke{CallID: "a1", ToolID: "ask", Arguments: frame.MustPayload(map[string]any{}), Depth: 0}))
	require.NoError(t, s.Started("a1"))
	requireTerminal(t, readCall(t, s, "a1"), frame.KindCompleted, 0)
	<-hostDone

	assert.ErrorIs(t, <-errs, child.ErrNotOffered)
	// depth 0 + 1 is within MaxDepth 1: "deep" is offered and dialed; it
	// is refused below only by the host's garbage.
	for i := range 3 {
		err := <-errs
		var ce *frame.Error
		require.ErrorAs(t, err, &ce, "call %d", i)
		assert.True(t, ce.Synthetic, "call %d: %v", i, err)
		assert.Equal(t, frame.CodeUnreachable, ce.Code, "call %d: %v", i, err)
	}
}

// A handler at the host's max_depth is refused locally with a DepthError
// naming the depth and the limit; nothing is dialed.
func TestCallDepthRefusedLocally(t *testing.T) {
	errs := make(chan error, 1)
	opts := child.Options{Tools: []child.Tool{{
		ID: "ask",
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			_, err := s.Call(ctx, "lookup", nil)
			errs <- err
			return nil, nil
		},
	}}}
	srv := serveChild(t, config{}, opts)
	st := defaultStartupWithCalls(&wire.Calls{Socket: "/nonexistent/calls.sock", MaxDepth: 3, MaxInFlight: 1, Tools: []wire.Tool{{ID: "lookup"}}})
	_, err := srv.host.Handshake(ctxT(t), st)
	require.NoError(t, err)
	s := dial(t, srv.host)
	require.NoError(t, s.Write(&wire.Invoke{CallID: "a1", ToolID: "ask", Arguments: frame.MustPayload(map[string]any{}), Tree: "t", Parent: "p", Depth: 3}))
	require.NoError(t, s.Started("a1"))
	readCall(t, s, "a1")
	var de *child.DepthError
	require.ErrorAs(t, <-errs, &de)
	assert.EqualValues(t, 4, de.Depth)
	assert.EqualValues(t, 3, de.Limit)
}

// defaultStartupWithCalls is the default startup offering calls.
func defaultStartupWithCalls(c *wire.Calls) *wire.Startup {
	st := skulktest.DefaultStartup()
	st.Calls = c
	return st
}

// Cancel after CloseSend closes the call connection (a cancel can no
// longer ride in the closed caller direction): the host sees the
// connection end at once and the call ends with a synthetic cancelled.
func TestCallCancelAfterCloseSend(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "calls.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	hostErr := make(chan error, 1) // one value, from the goroutine below
	go func() {                    // the host's side: stopped by the connection's end or its deadline
		nc, err := ln.Accept()
		if err != nil {
			hostErr <- err
			return
		}
		defer nc.Close()
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		r := packetio.NewReader(nc, packetio.DefaultLimits())
		for { // the invoke, started, completed, then the end of the connection
			if _, err := r.ReadPacket(); err != nil {
				hostErr <- err
				return
			}
		}
	}()
	errs := make(chan error, 1) // one value, from the handler
	opts := child.Options{Tools: []child.Tool{{
		ID: "ask",
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			c, err := s.Call(ctx, "lookup", nil)
			if err == nil {
				require.NoError(t, c.CloseSend())
				c.Cancel()
				_, err = c.Wait()
			}
			errs <- err
			return nil, nil
		},
	}}}
	srv := serveChild(t, config{}, opts)
	st := defaultStartupWithCalls(&wire.Calls{Socket: sock, MaxDepth: 1, MaxInFlight: 2, Tools: []wire.Tool{{ID: "lookup"}}})
	_, err = srv.host.Handshake(ctxT(t), st)
	require.NoError(t, err)
	s := dial(t, srv.host)
	require.NoError(t, s.Write(&wire.Invoke{CallID: "a1", ToolID: "ask", Arguments: frame.MustPayload(map[string]any{})}))
	require.NoError(t, s.Started("a1"))
	requireTerminal(t, readCall(t, s, "a1"), frame.KindCompleted, 0)
	assert.ErrorIs(t, <-hostErr, io.EOF, "the host saw the connection end, not its own deadline")
	var ce *frame.Error
	require.ErrorAs(t, <-errs, &ce)
	assert.Equal(t, frame.CodeCancelled, ce.Code)
	assert.True(t, ce.Synthetic)
}
