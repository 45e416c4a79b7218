package host

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
)

// TestCrashDeliversWrittenChunks: every chunk the child wrote before it
// exited reaches the caller, in order, before the synthetic unreachable,
// which carries the next sequence; the terminal comes within 1 s of the
// last frame received before it (the child's last chunk, or the call's
// started, which the host gives once a ready child took the call; the
// crash follows at once). The time from the call to its started is not
// counted: under load a restarting child can take more than a second to
// start.
func TestCrashDeliversWrittenChunks(t *testing.T) {
	cfg := fastHealth(realConfig())
	cfg.PoolSize = 2 // one slot restarts while the other takes the next call
	cfg.Restart.MaxRestarts = 1000
	h, _ := testHost(t, cfg, 2*time.Minute)
	ns := []int{0, 1, 2, 3, 7, 40}
	const rounds = 20 // each n this many times
	var worst time.Duration
	for round := range rounds {
		for _, n := range ns {
			ctx := callCtx(t, 30*time.Second)
			c, err := h.Call(ctx, "crash", frame.MustPayload(map[string]any{"after": n}))
			require.NoErrorf(t, err, "round %d after=%d", round, n)
			var last time.Time // when the newest frame before the terminal was received
			want := uint64(0)
			for {
				f, err := c.Recv(ctx)
				require.NoErrorf(t, err, "round %d after=%d: Recv", round, n)
				require.Falsef(t, f.Sequence != want, "round %d after=%d: %v with sequence %d, want %d", round, n, f.Kind, f.Sequence, want)
				want++
				if f.Kind == frame.KindChunk {
					var p struct {
						I uint64 `json:"i"`
					}
					if err := f.Payload.Decode(&p); err != nil || p.I != f.Sequence-1 {
						require.FailNow(t, fmt.Sprintf("round %d after=%d: chunk %d has i=%d (%v)", round, n, f.Sequence, p.I, err))
					}
				}
				if f.Kind.IsTerminal() {
					wantSynthetic(t, f, frame.CodeUnreachable)
					require.Falsef(t, f.Sequence != uint64(n)+1, "round %d after=%d: %d chunks before the synthetic unreachable, want %d", round, n, f.Sequence-1, n)
					break
				}
				last = time.Now()
			}
			d := time.Since(last)
			worst = max(worst, d)
			assert.Falsef(t, d > time.Second, "round %d after=%d: terminal %v after the frame before it, want within 1 s", round, n, d)
		}
	}
	t.Logf("%d crashes: worst last-frame-to-terminal %v", rounds*len(ns), worst)
	succeeds(t, h)
}

// TestCrashCallerNotReading: a caller that does not read cannot hold a dead
// child's stop beyond exitDrain: the connection is closed and the call ends
// with the frames it queued, then the synthetic unreachable right after them.
func TestCrashCallerNotReading(t *testing.T) {
	cfg := fastHealth(realConfig())
	h, _ := testHost(t, cfg, time.Minute)
	pid := readyPID(t, h, 0)
	ctx := callCtx(t, 30*time.Second)
	c, err := h.Call(ctx, "crash", frame.MustPayload(map[string]any{"after": 100}))
	require.NoError(t, err)
	// The restart comes after the stop, which waited exitDrain for a
	// reader blocked on the full queue.
	start := time.Now()
	readyPID(t, h, pid)
	if d := time.Since(start); d < exitDrain {
		assert.Fail(t, fmt.Sprintf("restarted after %v, before the drain grace %v", d, exitDrain))
	}
	term, n := recvUntilTerminal(t, c, 10*time.Second)
	wantSynthetic(t, term, frame.CodeUnreachable)
	require.Falsef(t, n != outQueue-1 || term.Sequence != uint64(n)+1, "%d chunks, then sequence %d; want %d, then %d", n, term.Sequence, outQueue-1, outQueue)
}
