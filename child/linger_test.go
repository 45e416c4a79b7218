package child_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/wire"
	"github.com/stretchr/testify/require"
)

// countingConn counts the Writes made to a connection. It hides the
// connection's file descriptor, so the child's Writer writes each batch
// with one Write (no writev): a Write is a write to the socket.
type countingConn struct {
	child.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// countWrites is a config.listen that counts the Writes to every stream
// connection the child accepts, together.
func countWrites(writes *atomic.Int64) func(child.Listener) child.Listener {
	return func(ln child.Listener) child.Listener {
		return child.NewListener(func() (child.Conn, error) {
			c, err := ln.Accept()
			if err != nil {
				return nil, err
			}
			return countingConn{Conn: c, writes: writes}, nil
		}, ln.Close)
	}
}

// TestLingerOneWrite: a plain request whose handler sends chunks and
// returns at once has its chunks, terminal and end written to the
// connection in one write, so its host wakes once. Streamed the same way
// after its linger has ended (a handler that keeps running), chunks go
// out before the terminal.
func TestLingerOneWrite(t *testing.T) {
	tool := child.Tool{ID: "twochunks", Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
		for i := range 2 {
			if err := s.Send(payload(map[string]any{"i": i}), nil); err != nil {
				return nil, err
			}
		}
		return payload(map[string]any{"sent": 2}), nil
	}}
	var writes atomic.Int64
	h, _ := startServe(t, config{extra: []child.Tool{tool}, listen: countWrites(&writes)})
	s := dial(t, h)
	for i, id := range []string{"l1", "l2", "l3"} {
		before := writes.Load()
		require.NoError(t, s.Request(id, "twochunks", nil))
		res := readCall(t, s, id)
		requireTerminal(t, res, frame.KindCompleted, 0)
		require.Len(t, res.Chunks(), 2)
		require.Equal(t, int64(1), writes.Load()-before, "call %d: writes for two chunks, the terminal and the end", i)
	}
}

// TestLingerBounded: a chunk that a plain request's handler sends and then
// keeps running reaches the host while the handler still runs: a linger
// ends after lingerTick (1 ms), not with the handler. The bound asserted
// is that tick plus margin for a loaded machine under -race.
func TestLingerBounded(t *testing.T) {
	sent := make(chan time.Time, 1) // one Send per call
	release := newGate()
	tool := child.Tool{ID: "sendwait", Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
		if err := s.Send(payload(map[string]any{"first": true}), nil); err != nil {
			return nil, err
		}
		sent <- time.Now()
		select {
		case <-release.ch:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		return nil, nil
	}}
	h, _ := startServe(t, config{extra: []child.Tool{tool}})
	s := dial(t, h)
	require.NoError(t, s.Request("lb1", "sendwait", nil))
	require.NoError(t, s.Conn.SetReadDeadline(deadline()))
	p, err := s.Read()
	require.NoError(t, err)
	got := time.Now()
	f, ok := p.(*wire.Frame)
	require.True(t, ok, "got %s", p.Type())
	require.Equal(t, frame.KindChunk, f.Kind)
	at := <-sent
	require.Less(t, got.Sub(at), 500*time.Millisecond, "the chunk waited for the handler")
	release.open()
	p, err = s.Read()
	require.NoError(t, err)
	f, ok = p.(*wire.Frame)
	require.True(t, ok, "got %s", p.Type())
	require.Equal(t, frame.KindCompleted, f.Kind)
	require.Equal(t, uint64(2), f.Sequence)
	p, err = s.Read()
	require.NoError(t, err)
	require.IsType(t, &wire.End{}, p)
}

// TestLingerConcurrentPlainRequests: plain requests on many connections
// at once, each handler sending chunks, all end with every chunk in
// order, under the race detector: the lingers' tick ends lingers while
// handlers start and finish theirs.
func TestLingerConcurrentPlainRequests(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		h, _ := tg.start(t, config{})
		var wg sync.WaitGroup
		for c := range 8 {
			s := dial(t, h)
			wg.Go(func() {
				for i := range 20 {
					id := "cp" + string(rune('a'+c)) + string(rune('a'+i))
					if err := s.Request(id, "count", map[string]any{"n": 5}); err != nil {
						t.Error(err)
						return
					}
					res, err := s.ReadCall(id, deadline())
					if err != nil {
						t.Error(err)
						return
					}
					chunks := res.Chunks()
					if len(chunks) != 5 || res.Terminal == nil || res.Terminal.Kind != frame.KindCompleted || !res.End {
						t.Errorf("call %s: %d chunks, terminal %+v, end %v", id, len(chunks), res.Terminal, res.End)
						return
					}
					for j, f := range chunks {
						if f.Sequence != uint64(j+1) {
							t.Errorf("call %s: chunk %d has sequence %d", id, j, f.Sequence)
						}
					}
				}
			})
		}
		wg.Wait()
	})
}
