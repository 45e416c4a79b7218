package host

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
)

// Hot-path benchmarks against the real cmd/skulk-child (built by TestMain):
// a stream of small frames, inline media, and sequential small calls.
//
//	go test -run '^$' -bench HotPath -benchtime 3x -count 6 ./host/ | tee new.txt
//	benchstat old.txt new.txt
func BenchmarkHotPath(b *testing.B) {
	cfg := realConfig()
	cfg.TempDir = b.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := Start(ctx, cfg)
	require.NoError(b, err)
	defer h.Close(context.Background())

	// One op is one call streaming 100,000 chunks {"i": i} through
	// count's output_schema, read with Frames.
	b.Run("small-stream", func(b *testing.B) {
		const n = 100_000
		args := frame.MustPayload(map[string]any{"n": n, "size": 0})
		b.ReportAllocs()
		cpu0 := hostCPU(b)
		for b.Loop() {
			c, err := h.Call(context.Background(), "count", args)
			require.NoError(b, err)
			got := 0
			for f, err := range c.Frames() {
				require.NoError(b, err)
				if f.Kind == frame.KindChunk {
					got++
				}
			}
			require.Falsef(b, got != n, "%d chunks, want %d", got, n)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/frame")
		// The host's own CPU (this process; the child is another), which
		// wall time hides when the child is the slower side.
		b.ReportMetric(float64(hostCPU(b)-cpu0)/float64(b.N*n), "host-cpu-ns/frame")
	})

	// One op is one call streaming 64 MiB of inline media in 1 MiB chunks.
	b.Run("media", func(b *testing.B) {
		const total, chunk = 64 << 20, 1 << 20
		args := frame.MustPayload(map[string]any{"bytes": total, "chunk": chunk})
		b.SetBytes(total)
		b.ReportAllocs()
		for b.Loop() {
			c, err := h.Call(context.Background(), "media", args)
			require.NoError(b, err)
			if got := readMedia(b, c); got != total {
				require.FailNow(b, fmt.Sprintf("%d bytes, want %d", got, total))
			}
		}
	})

	// One op is one call of count n=1.
	b.Run("calls", func(b *testing.B) {
		args := frame.MustPayload(map[string]any{"n": 1})
		b.ReportAllocs()
		for b.Loop() {
			c, err := h.Call(context.Background(), "count", args)
			require.NoError(b, err)
			if _, err := c.Wait(); err != nil {
				require.FailNow(b, fmt.Sprint(err))
			}
		}
	})
}

// hostCPU returns the user and system CPU time this process has used, in
// nanoseconds.
func hostCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return ru.Utime.Nano() + ru.Stime.Nano()
}
