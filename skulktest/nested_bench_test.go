package skulktest_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/skulktest"
	"github.com/skulkrt/skulk/wire"
)

// p50 reports the median of durations as the benchmark's p50-ns metric.
func p50(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Nanoseconds()), "p50-ns")
}

// BenchmarkHostMadeCall: a small call the host makes to an in-process
// provider's tool that answers at once: the reference for
// BenchmarkNestedHostToolCall.
//
//	go test ./skulktest -run '^$' -bench 'HostMadeCall|NestedHostToolCall'
func BenchmarkHostMadeCall(b *testing.B) {
	opts := child.Options{Tools: []child.Tool{{ID: "tiny", Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
		return nil, nil
	}}}}
	h := skulktest.StartProvider(b, opts, host.Config{})
	ctx := context.Background()
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		c, err := h.Call(ctx, "tiny", nil, host.WithInput())
		require.NoError(b, err)
		if _, err := c.Wait(); err != nil {
			require.FailNow(b, fmt.Sprint(err))
		}
		d = append(d, time.Since(start))
	}
	b.StopTimer()
	p50(b, d)
}

// BenchmarkNestedHostToolCall: a small call a provider's handler makes
// through its host to a host-side Go function that answers at once.
func BenchmarkNestedHostToolCall(b *testing.B) {
	tiny := &skulktest.FakeTool{Tool: wire.Tool{ID: "tiny"}}
	d := make([]time.Duration, 0, b.N)
	opts := child.Options{Tools: []child.Tool{{ID: "loop", Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
		for range b.N {
			start := time.Now()
			c, err := s.Call(ctx, "tiny", nil)
			if err != nil {
				return nil, err
			}
			if err := c.CloseSend(); err != nil {
				return nil, err
			}
			if _, err := c.Wait(); err != nil {
				return nil, err
			}
			d = append(d, time.Since(start))
		}
		return nil, nil
	}}}}
	h := skulktest.StartProvider(b, opts, host.Config{Calls: host.Calls{HostTools: []host.HostTool{tiny.HostTool()}}})
	b.ResetTimer()
	c, err := h.Call(context.Background(), "loop", nil, host.WithInput())
	require.NoError(b, err)
	if _, err := c.Wait(); err != nil {
		require.FailNow(b, fmt.Sprint(err))
	}
	b.StopTimer()
	p50(b, d)
}

// BenchmarkNestedChildToolCall: a small call a provider's handler makes
// through its host to a tool of the host's children (here its own
// provider's) that answers at once.
func BenchmarkNestedChildToolCall(b *testing.B) {
	d := make([]time.Duration, 0, b.N)
	opts := child.Options{Tools: []child.Tool{
		{ID: "tiny", Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) { return nil, nil }},
		{ID: "loop", Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			for range b.N {
				start := time.Now()
				c, err := s.Call(ctx, "tiny", nil)
				if err != nil {
					return nil, err
				}
				if err := c.CloseSend(); err != nil {
					return nil, err
				}
				if _, err := c.Wait(); err != nil {
					return nil, err
				}
				d = append(d, time.Since(start))
			}
			return nil, nil
		}},
	}}
	h := skulktest.StartProvider(b, opts, host.Config{Calls: host.Calls{Tools: []string{"tiny"}}})
	b.ResetTimer()
	c, err := h.Call(context.Background(), "loop", nil, host.WithInput())
	require.NoError(b, err)
	if _, err := c.Wait(); err != nil {
		require.FailNow(b, fmt.Sprint(err))
	}
	b.StopTimer()
	p50(b, d)
}
