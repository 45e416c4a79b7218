package child_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/wire"
	"github.com/stretchr/testify/require"
)

// TestPlainRequestChunkWhileRunning: a chunk that a plain request's
// handler sends and then keeps running reaches the host while the handler
// still runs. docs/protocol.md §2, Writing: a writer may coalesce packets,
// but none waits for later ones (here, the terminal). The bound asserted is margin
// for a loaded machine under -race.
func TestPlainRequestChunkWhileRunning(t *testing.T) {
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
	require.True(t, ok, "got %s", packetio.TypeOf(p))
	require.Equal(t, frame.KindChunk, f.Kind)
	at := <-sent
	require.Less(t, got.Sub(at), 500*time.Millisecond, "the chunk waited")
	release.open()
	p, err = s.Read()
	require.NoError(t, err)
	f, ok = p.(*wire.Frame)
	require.True(t, ok, "got %s", packetio.TypeOf(p))
	require.Equal(t, frame.KindCompleted, f.Kind)
	require.Equal(t, uint64(2), f.Sequence)
	p, err = s.Read()
	require.NoError(t, err)
	require.IsType(t, &wire.End{}, p)
}

// TestPlainRequestsConcurrentChunks: plain requests on many connections
// at once, each handler sending chunks, all end with every chunk in
// order, under the race detector.
func TestPlainRequestsConcurrentChunks(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		h, _ := tg.start(t, config{})
		var wg sync.WaitGroup
		for c := range 8 {
			s := dial(t, h)
			wg.Go(func() {
				for i := range 20 {
					id := "cp" + string(rune('a'+c)) + string(rune('a'+i))
					if err := s.Request(id, "count", map[string]any{"n": 5}); err != nil {
						assert.Fail(t, fmt.Sprint(err))
						return
					}
					res, err := s.ReadCall(id, deadline())
					if err != nil {
						assert.Fail(t, fmt.Sprint(err))
						return
					}
					chunks := res.Chunks()
					if len(chunks) != 5 || res.Terminal == nil || res.Terminal.Kind != frame.KindCompleted || !res.End {
						assert.Fail(t, fmt.Sprintf("call %s: %d chunks, terminal %+v, end %v", id, len(chunks), res.Terminal, res.End))
						return
					}
					for j, f := range chunks {
						assert.Falsef(t, f.Sequence != uint64(j+1), "call %s: chunk %d has sequence %d", id, j, f.Sequence)
					}
				}
			})
		}
		wg.Wait()
	})
}
