//go:build unix

package coalesce

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/internal/testnet"
	"github.com/skulkrt/skulk/wire"
)

// TestFullSince: a Writer whose peer reads nothing reports when its write
// met the full socket, keeps that time while the write waits, and reports
// the zero time again once the peer has read everything and the write
// ended.
func TestFullSince(t *testing.T) {
	ua, ub := testnet.SocketPair(t)
	defer ub.Close()
	defer ua.Close()
	w := New(ua, wire.Limits{})
	require.True(t, w.FullSince().IsZero(), "an idle Writer")
	p := smallChunk(t, "c1", 1)
	before := time.Now()
	var full time.Time
	for i := 0; full.IsZero(); i++ {
		require.Less(t, i, 1<<20, "the socket never filled")
		if ok, err := w.TryWrite(p); err != nil {
			require.NoError(t, err)
		} else if !ok {
			time.Sleep(time.Millisecond)
		}
		full = w.FullSince()
	}
	require.False(t, full.Before(before), "FullSince %v, before the first write at %v", full, before)
	// The host compares it with time.Now to judge a child that does not
	// read: a reading of the monotonic clock (time.Time's String shows it
	// as m=), so that a step of the wall clock does not age the write.
	require.Contains(t, full.String(), " m=", "FullSince has no monotonic clock reading")
	time.Sleep(20 * time.Millisecond)
	require.Equal(t, full, w.FullSince(), "the waiting write keeps its time")

	read := make(chan error, 1)
	go func() { // ends at EOF, when the test closes ua
		_, err := io.Copy(io.Discard, ub)
		read <- err
	}()
	require.NoError(t, w.Flush())
	require.True(t, w.FullSince().IsZero(), "FullSince after every write ended")
	require.NoError(t, w.Write(context.Background(), Request, p))
	require.NoError(t, w.Close())
	ua.Close()
	require.NoError(t, <-read)
}
