package coalesce

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/testnet"
	"github.com/skulkrt/skulk/internal/turns"
	"github.com/skulkrt/skulk/wire"
)

// TestGatedWriterWaitsForItsTurn: a gated Writer that streams stops
// writing once it has written gateAfter bytes while the Gate's one slot
// is taken, its sender then blocks on the full queue (backpressure), and
// once the slot is free every packet arrives, in order.
func TestGatedWriterWaitsForItsTurn(t *testing.T) {
	ua, ub := testnet.SocketPair(t)
	defer ub.Close()
	defer ua.Close()
	g := turns.New(1)
	g.Enter(make(chan struct{}, 1)) // the test holds the only slot
	w := NewGated(ua, wire.Limits{}, g)
	p := smallChunk(t, "c1", 1)
	enc, err := packetio.Encode(p, wire.Limits{})
	require.NoError(t, err)
	const frames = 40_000 // several times gateAfter plus the queue
	require.Greater(t, frames*len(enc), 4*(gateAfter+maxPending))

	var read atomic.Int64
	readDone := make(chan error, 1)
	go func() { // ends at EOF, when the test closes ua
		r := packetio.NewReader(ub, wire.Limits{})
		for want := uint64(1); ; want++ {
			pk, err := r.ReadPacket()
			if err != nil {
				if want != frames+1 {
					readDone <- err
				} else {
					readDone <- nil
				}
				return
			}
			if f, ok := pk.(*wire.Frame); !ok || f.Sequence != want {
				readDone <- errOrder
				return
			}
			read.Add(1)
		}
	}()
	sent := make(chan error, 1)
	go func() { // ends when every frame is queued
		for i := range uint64(frames) {
			p.Sequence = i + 1
			if err := w.Write(context.Background(), Stream, p); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()

	// Stalled at the gate: what arrived stops growing, short of the whole.
	var stalled int64
	require.Eventually(t, func() bool {
		n := read.Load()
		time.Sleep(50 * time.Millisecond)
		stalled = read.Load()
		return n == stalled && n > 0
	}, 10*time.Second, time.Millisecond)
	require.LessOrEqual(t, stalled*int64(len(enc)), int64(gateAfter+2*maxPending), "the flusher wrote past its turn")
	select {
	case err := <-sent:
		t.Fatalf("the sender finished (%v) while its flusher waited for the gate", err)
	default:
	}

	g.Leave() // the flusher's turn
	require.NoError(t, <-sent)
	require.NoError(t, w.Flush())
	require.NoError(t, w.Close())
	ua.Close()
	require.NoError(t, <-readDone)
	require.EqualValues(t, frames, read.Load())
}

var errOrder = errorString("a frame out of order")

type errorString string

func (e errorString) Error() string { return string(e) }
