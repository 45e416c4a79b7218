package compare

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// benchSkulk opens a skulk session with the bench child for b and reports,
// besides the time per op, the host's allocations per op counted by
// runtime.MemStats (the child's are in its own process: see -childprofile).
func benchSkulk(b *testing.B, run func(context.Context, *skulkSession, int) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ss, err := (&skulkSystem{sys: Skulk, bin: bins.Skulk, dir: b.TempDir()}).start(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer ss.close()
	if err := run(ctx, ss, 100); err != nil { // warm up: connections, buffers
		b.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	if err := run(ctx, ss, b.N); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N), "host-allocs/op")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N), "host-B/op")
}

// BenchmarkSkulkSmallStream: one op is one 64-byte frame of a count call.
func BenchmarkSkulkSmallStream(b *testing.B) {
	benchSkulk(b, func(ctx context.Context, ss *skulkSession, n int) error { return ss.smallStream(ctx, n) })
}

// BenchmarkSkulkMedia: one op is one 1 MiB inline chunk.
func BenchmarkSkulkMedia(b *testing.B) {
	b.SetBytes(mediaChunk)
	benchSkulk(b, func(ctx context.Context, ss *skulkSession, n int) error { return ss.media(ctx, n, mediaChunk) })
}

// BenchmarkSkulkEcho: one op is one 64-byte frame sent and echoed.
func BenchmarkSkulkEcho(b *testing.B) {
	benchSkulk(b, func(ctx context.Context, ss *skulkSession, n int) error { return ss.echo(ctx, n) })
}

// BenchmarkSkulkCall: one op is one sequential small call.
func BenchmarkSkulkCall(b *testing.B) {
	benchSkulk(b, func(ctx context.Context, ss *skulkSession, n int) error {
		for range n {
			if err := ss.call(ctx); err != nil {
				return err
			}
		}
		return nil
	})
}
