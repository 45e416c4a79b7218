package hostile_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
)

// outputCounter counts the forwarded output lines of children and the
// lines the host reports dropped.
type outputCounter struct {
	mu        sync.Mutex
	forwarded int
	dropped   int64
	reports   int
}

func (c *outputCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *outputCounter) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *outputCounter) WithGroup(string) slog.Handler            { return c }
func (c *outputCounter) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch r.Message {
	case "child output":
		c.forwarded++
	case "child output dropped":
		c.reports++
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "dropped" {
				c.dropped += a.Value.Int64()
			}
			return true
		})
	}
	return nil
}

// TestLogFloodRateLimited: a child that writes 40,000 lines as fast as it
// can (20,000 on stdout, 20,000 on stderr) gets at most the burst plus the
// rate's worth of them into the host's log; the rest are counted in
// "child output dropped" records, so that every line is forwarded or
// counted, and the host and its next call are unaffected.
func TestLogFloodRateLimited(t *testing.T) {
	const lines = 20000
	counter := &outputCounter{}
	cfg := config(t, "serve", t.TempDir())
	cfg.Logger = slog.New(counter)
	h := startHost(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	c, err := h.Call(ctx, "logflood", frame.MustPayload(map[string]any{"n": lines}), host.WithInput())
	require.NoError(t, err)
	_, err = c.Wait()
	require.NoError(t, err)
	works(t, h)
	require.NoError(t, h.Close(ctx)) // the child's output ends: the last loss is reported
	elapsed := time.Since(start)
	counter.mu.Lock()
	defer counter.mu.Unlock()
	t.Logf("%d lines forwarded, %d dropped in %d reports, in %v", counter.forwarded, counter.dropped, counter.reports, elapsed)
	// The rate's bound: a burst of 1,000 lines, then 200 a second.
	bound := 1000 + int(elapsed.Seconds()*200) + 1
	assert.LessOrEqual(t, counter.forwarded, bound, "lines forwarded past the rate")
	assert.Equal(t, int64(2*lines), int64(counter.forwarded)+counter.dropped, "every line forwarded or counted as dropped")
	assert.Positive(t, counter.reports)
}
