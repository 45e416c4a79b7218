package host

import (
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
)

// newOutbox is a ready outbox of its own, as a Call holds one.
func newOutbox() *outbox {
	o := &outbox{}
	o.init()
	return o
}

func chunkAt(seq uint64) frame.Frame {
	f, _ := frame.NewChunk("x", frame.ProviderToCaller, seq, frame.MustPayload(map[string]any{"i": seq}), nil)
	return f
}

// woken reports whether the outbox's ready signal is set, consuming it.
func woken(o *outbox) bool {
	select {
	case <-o.ready:
		return true
	default:
		return false
	}
}

// A waiting caller is woken once per burst, at its published frame, and
// takes the frames in order.
func TestOutboxWakesOncePerBurst(t *testing.T) {
	o := newOutbox()
	if _, ok := o.take(); ok {
		require.FailNow(t, "take from an empty outbox")
	}
	for seq := uint64(1); seq <= 3; seq++ {
		o.put(chunkAt(seq), false, nil, nil)
		require.Falsef(t, woken(o), "woken at unpublished frame %d", seq)
	}
	o.put(chunkAt(4), true, nil, nil)
	require.True(t, woken(o), "not woken at the burst's last frame")
	for want := uint64(1); want <= 4; want++ {
		f, ok := o.take()
		require.Falsef(t, !ok || f.Sequence != want, "take: %d %v, want %d", f.Sequence, ok, want)
	}
	// A caller that did not wait is not woken: nothing is armed.
	o.put(chunkAt(5), true, nil, nil)
	require.False(t, woken(o), "woken without a waiting take")
	o.take()
	o.take() // empty: arms the wake-up
	o.put(chunkAt(6), false, nil, nil)
	require.False(t, woken(o), "woken at an unpublished frame")
	o.put(chunkAt(7), true, nil, nil)
	require.True(t, woken(o), "a published frame did not wake the waiting caller")
}

// In a long burst a waiting caller is woken once wakeBatch frames are
// queued, not only at the burst's end.
func TestOutboxWakesMidBurstAtWakeBatch(t *testing.T) {
	o := newOutbox()
	o.take() // the caller waits
	for seq := uint64(1); seq < wakeBatch; seq++ {
		o.put(chunkAt(seq), false, nil, nil)
		require.Falsef(t, woken(o), "woken at unpublished frame %d of %d", seq, wakeBatch)
	}
	o.put(chunkAt(wakeBatch), false, nil, nil)
	require.True(t, woken(o), "not woken with wakeBatch frames queued")
	// Once woken, the caller is not woken again until it waits again.
	o.put(chunkAt(wakeBatch+1), false, nil, nil)
	require.False(t, woken(o), "woken twice for one wait")
}

// The ring starts small and grows while full, up to outQueue, keeping the
// order of frames that had wrapped around it.
func TestOutboxGrowsInOrder(t *testing.T) {
	o := newOutbox()
	next, want := uint64(1), uint64(1)
	put := func(n int) {
		for range n {
			require.True(t, o.put(chunkAt(next), false, nil, nil), "put refused")
			next++
		}
	}
	take := func(n int) {
		for range n {
			f, ok := o.take()
			require.Falsef(t, !ok || f.Sequence != want, "take: %d %v, want %d", f.Sequence, ok, want)
			want++
		}
	}
	// A take lends every frame queued (a few here) and the take after
	// them gives them back: an empty take frees their slots.
	giveBack := func() {
		_, ok := o.take()
		require.False(t, ok, "take from an empty outbox")
	}
	put(3)
	take(3)
	giveBack()    // the ring's head moves on
	put(outStart) // full, wrapped around the end
	require.Falsef(t, len(o.buf) != outStart, "ring of %d frames, want %d before it is full", len(o.buf), outStart)
	put(1) // grows
	if len(o.buf) != 2*outStart {
		require.FailNow(t, fmt.Sprintf("ring of %d frames after growing, want %d", len(o.buf), 2*outStart))
	}
	take(o.n)
	giveBack()
	put(outQueue) // grows to the bound, never past it
	require.Falsef(t, len(o.buf) != outQueue, "ring of %d frames, want the bound %d", len(o.buf), outQueue)
	take(outQueue)
}

// Media bytes bound the queue as well as frames: past outBytes a put waits
// (a frame of any size is taken into an empty queue), and the reader is let
// go once half of the bytes are taken and given back.
func TestOutboxBoundsBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		media := func(seq uint64, n int) frame.Frame {
			f, _ := frame.NewChunk("x", frame.ProviderToCaller, seq, nil, &frame.InlineMedia{Data: make([]byte, n), MediaType: "x/y"})
			return f
		}
		o := newOutbox()
		closing := make(chan struct{})
		const chunk = outBytes / 4
		for seq := uint64(1); seq <= 4; seq++ {
			o.put(media(seq, chunk), false, closing, nil)
		}
		put := make(chan bool, 1)                                          // one value, from the put below
		go func() { put <- o.put(media(5, chunk), false, closing, nil) }() // stopped by room or closing
		synctest.Wait()
		select {
		case <-put:
			require.FailNow(t, "a put past outBytes did not wait")
		default:
		}
		// Large frames are lent one at a time; a take gives back the frame
		// the one before it lent.
		o.take()
		synctest.Wait()
		select {
		case <-put:
			require.FailNow(t, "a put past outBytes went on before any frame was given back")
		default:
		}
		o.take() // gives the first frame back: three quarters of the bytes are queued
		synctest.Wait()
		select {
		case <-put:
			require.FailNow(t, "let go with three quarters of the bytes still queued")
		default:
		}
		o.take() // gives the second back: half the bytes left, room
		synctest.Wait()
		require.True(t, <-put, "put refused")
		for o.n > 0 {
			o.take() // the last gives the last frame back
		}
		require.EqualValuesf(t, 0, o.bytes, "%d bytes counted in an empty queue", o.bytes)
		// A frame larger than the bound is taken into an empty queue.
		require.True(t, o.put(media(6, 2*outBytes), false, closing, nil), "put of a large frame refused")
		close(closing)
	})
}

// A full outbox publishes what it holds, blocks its reader until it is half
// empty, and lets closing end the wait.
func TestOutboxFullBlocksUntilHalfEmpty(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := newOutbox()
		o.take() // the caller waits
		for seq := range uint64(outQueue) {
			o.put(chunkAt(seq), false, nil, nil)
		}
		closing := make(chan struct{})
		put := make(chan bool, 1)
		go func() { put <- o.put(chunkAt(outQueue), false, closing, nil) }() // stopped by room or closing
		synctest.Wait()
		require.True(t, woken(o), "a full outbox did not wake its caller")
		// The first take lends half the queue; the take after the last
		// of them gives them back.
		for i := range outQueue / 2 {
			o.take()
			synctest.Wait()
			select {
			case <-put:
				require.FailNow(t, fmt.Sprintf("put went on after %d takes, before the queue was half empty", i+1))
			default:
			}
		}
		o.take()
		synctest.Wait()
		if ok := <-put; !ok {
			require.FailNow(t, "put refused after room")
		}
		for want := uint64(outQueue/2 + 1); want <= outQueue; want++ {
			if f, ok := o.take(); !ok || f.Sequence != want {
				require.FailNow(t, fmt.Sprintf("take: %d %v, want %d", f.Sequence, ok, want))
			}
		}
		_, ok := o.take() // gives the last lent frames back
		require.False(t, ok, "take from an empty outbox")
		require.Zero(t, o.n, "frames counted in an empty outbox")

		for seq := range uint64(outQueue) {
			o.put(chunkAt(seq), false, nil, nil)
		}
		go func() { put <- o.put(chunkAt(outQueue), false, closing, nil) }() // stopped by closing below
		synctest.Wait()
		close(closing)
		if ok := <-put; ok {
			require.FailNow(t, "put on a full outbox reported true after closing")
		}
	})
}

// A take lends the caller a batch under one lock (half the queue at most):
// the frames stay counted against the bounds until the take after the
// last of them, and a put queues a batch in order.
func TestOutboxLendsABatch(t *testing.T) {
	o := newOutbox()
	fs := make([]frame.Frame, outQueue/2+8)
	for i := range fs {
		fs[i] = chunkAt(uint64(i + 1))
	}
	require.Equal(t, len(fs), o.putBatch(fs, true, nil, nil))
	f, ok := o.take()
	require.True(t, ok)
	require.EqualValues(t, 1, f.Sequence)
	require.Equal(t, lendFrames, o.lent, "frames lent by one take")
	for want := uint64(2); want <= lendFrames; want++ {
		f, ok := o.take()
		require.True(t, ok)
		require.Equal(t, want, f.Sequence)
	}
	require.Equal(t, len(fs), o.n, "lent frames stop counting before they are given back")
	f, ok = o.take() // gives the batch back, lends the rest
	require.True(t, ok)
	require.EqualValues(t, lendFrames+1, f.Sequence)
	require.Equal(t, len(fs)-lendFrames, o.n)
	for range len(fs) - lendFrames - 1 {
		_, ok := o.take()
		require.True(t, ok)
	}
	_, ok = o.take()
	require.False(t, ok, "take from an empty outbox")
	require.Zero(t, o.n)
	require.Zero(t, o.bytes)
}

// A putBatch that finds the queue full and closing closed queues what fit
// and reports how many.
func TestOutboxPutBatchStopsAtClosing(t *testing.T) {
	o := newOutbox()
	fs := make([]frame.Frame, outQueue+3)
	for i := range fs {
		fs[i] = chunkAt(uint64(i + 1))
	}
	closing := make(chan struct{})
	close(closing)
	require.Equal(t, outQueue, o.putBatch(fs, false, closing, nil))
	require.Equal(t, outQueue, o.n)
}
