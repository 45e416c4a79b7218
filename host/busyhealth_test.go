package host

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
)

// TestHealthWhileEveryStreamIsBusy reads hundreds of endless streams as
// fast as the child sends them, for several health timeouts. Every
// caller's read finds data at once and never waits, so the host's
// supervisor and control reader get the CPU only if the stream readers
// yield: the child answers every ping, and the host must see the answers
// in time. Nothing may be declared unhealthy, and no stream starves:
// in the last window every stream delivers. The window lasts at least a
// health timeout, and until the streams together delivered as many
// chunks as starveChunks for each: on a machine whose load leaves the
// host a sliver of a core, a round of turns of 512 busy readers takes
// longer than a health timeout, and a window of wall time alone would
// measure the machine's load, not whether a stream is left out.
func TestHealthWhileEveryStreamIsBusy(t *testing.T) {
	if testing.Short() {
		t.Skip("reads hundreds of streams for seconds")
	}
	const streams = 512
	// starveChunks is how many chunks per stream, on average, the last
	// window lasts for: about two bursts (a reader's turn takes one
	// 16 KiB read, some 230 of these chunks), so that with turns taken
	// fairly every reader has had one. At load 28 on 2 cores under -race
	// the host delivered 7,000 chunks a second in all, 668 to 976 per
	// stream a minute: a round of turns took about 20 s.
	const starveChunks = 500
	cfg := realConfig()
	cfg.HealthInterval = 100 * time.Millisecond
	cfg.HealthTimeout = 2500 * time.Millisecond
	cfg.CancelGrace = unreadCancelGrace
	h, _ := testHost(t, cfg, 2*time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	counts := make([]atomic.Int64, streams)
	errs := make([]error, streams)
	var wg sync.WaitGroup
	calls := make([]*Call, streams)
	for i := range calls {
		c, err := h.Call(ctx, "count", frame.MustPayload(map[string]any{"n": 1 << 30, "size": 32}))
		require.NoErrorf(t, err, "call %d", i)
		calls[i] = c
	}
	for i, c := range calls {
		wg.Go(func() { readCounting(ctx, c, &counts[i], &errs[i]) }) // ends when the test cancels its call, or the call fails
	}
	total := func() int64 {
		var n int64
		for i := range counts {
			n += counts[i].Load()
		}
		return n
	}
	// Two health timeouts of reading flat out, then the last window.
	time.Sleep(2 * cfg.HealthTimeout)
	before := make([]int64, streams)
	for i := range counts {
		before[i] = counts[i].Load()
	}
	start, first := time.Now(), total()
	time.Sleep(cfg.HealthTimeout)
	const windowLimit = 60 * time.Second // a host that delivers nearly nothing fails, rather than hang
	for total()-first < streams*starveChunks && time.Since(start) < windowLimit {
		time.Sleep(10 * time.Millisecond)
	}
	window, delivered := time.Since(start), total()-first
	idle, least, most := 0, int64(-1), int64(0)
	for i := range counts {
		d := counts[i].Load() - before[i]
		if d == 0 {
			idle++
		}
		if least < 0 || d < least {
			least = d
		}
		most = max(most, d)
	}
	t.Logf("last window %v: %d chunks, per stream %d to %d", window.Round(time.Millisecond), delivered, least, most)
	info := h.Children()[0]
	cancel()
	for _, c := range calls {
		c.Cancel()
	}
	wg.Wait()
	failed, firstErr := 0, error(nil)
	for _, err := range errs {
		if err != nil {
			if failed++; firstErr == nil {
				firstErr = err
			}
		}
	}
	require.Falsef(t, failed > 0, "%d of %d streams failed, the first: %v", failed, streams, firstErr)
	require.Falsef(t, info.Restarts != 0 || info.LastCause != nil, "child restarted %d times while its streams were read (last cause: %v)", info.Restarts, info.LastCause)
	assert.Falsef(t, idle > 0, "%d of %d streams delivered nothing in %v, while the others delivered %d chunks", idle, streams, window, delivered)
}

// TestHealthWhileHostWriterStalls: a ping that the host has not yet put
// on the connection (its control writer starved of CPU, here held back
// by a Cork) is not the child's to answer. The child is not declared
// unhealthy for the time the host took, however many health timeouts
// that is, and it answers the pings once they go out.
func TestHealthWhileHostWriterStalls(t *testing.T) {
	cfg := fastHealth(fakeConfig("serve"))
	cfg.HealthTimeout = 300 * time.Millisecond
	cfg.IdleHealthInterval = cfg.HealthInterval // idle, yet pinged every interval
	h, _ := testHost(t, cfg, time.Minute)
	h.mu.Lock()
	ch := h.slots[0].cur
	h.mu.Unlock()
	pongs := func() uint64 {
		var n uint64
		for _, c := range h.Stats().PingRTT.Counts {
			n += c
		}
		return n
	}
	waitFor(t, func() bool { return pongs() > 0 })

	ch.ctrlW.Cork() // the pings from now on stay in the host's writer
	time.Sleep(5 * cfg.HealthTimeout)
	before := pongs()
	require.NoError(t, ch.ctrlW.Uncork())
	waitFor(t, func() bool { return pongs() > before })
	info := h.Children()[0]
	require.Equalf(t, "ready", info.State, "child state (cause: %v)", info.LastCause)
	require.Zero(t, info.Restarts)
	require.NoError(t, info.LastCause)
}
