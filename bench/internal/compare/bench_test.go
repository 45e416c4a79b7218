package compare

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/wire"
)

// childEnvVar names the environment variable whose space-separated
// KEY=VALUE pairs the Skulk benchmarks add to the bench child's
// environment, for experiments such as SKULK_BENCH_CHILD_ENV=GOMAXPROCS=1
// (docs/performance.md). Unset, the child gets nothing extra.
const childEnvVar = "SKULK_BENCH_CHILD_ENV"

// childBinVar names the environment variable that gives the Skulk
// benchmarks a bench child binary to drive instead of the one built from
// this tree: test binaries of two revisions given the same child compare
// their hosts alone (bench/README.md, "Comparing builds").
const childBinVar = "SKULK_BENCH_CHILD"

// benchSkulk opens a skulk session with the bench child for b and reports,
// besides the time per op, the host's allocations per op counted by
// runtime.MemStats (the child's are in its own process: see -childprofile)
// and the CPU time per op of the host process and of the child.
func benchSkulk(b *testing.B, run func(context.Context, *skulkSession, int) error) {
	benchSkulkTraced(b, nil, run)
}

// benchSkulkTraced is benchSkulk with tp as the host's TracerProvider
// (nil: tracing off).
func benchSkulkTraced(b *testing.B, tp trace.TracerProvider, run func(context.Context, *skulkSession, int) error) {
	benchSkulkSystem(b, &skulkSystem{sys: Skulk, bin: bins.Skulk, dir: b.TempDir(), env: strings.Fields(os.Getenv(childEnvVar)), tp: tp}, run)
}

// benchSkulkSystem is benchSkulk with sys as the system.
func benchSkulkSystem(b *testing.B, sys *skulkSystem, run func(context.Context, *skulkSession, int) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ss, err := sys.start(ctx)
	require.NoError(b, err)
	defer ss.close()
	if err := run(ctx, ss, 100); err != nil { // warm up: connections, buffers
		require.FailNow(b, fmt.Sprint(err))
	}
	pid := ss.h.Children()[0].PID
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	hostCPU, childCPU := selfCPU(), procCPU(pid)
	b.ResetTimer()
	require.NoError(b, run(ctx, ss, b.N))
	b.StopTimer()
	hostCPU, childCPU = selfCPU()-hostCPU, procCPU(pid)-childCPU
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N), "host-allocs/op")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N), "host-B/op")
	b.ReportMetric(float64(hostCPU.Nanoseconds())/float64(b.N), "host-cpu-ns/op")
	if childCPU >= 0 {
		b.ReportMetric(float64(childCPU.Nanoseconds())/float64(b.N), "child-cpu-ns/op")
	}
}

// selfCPU is the CPU time (user and system) this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is the CPU time (user and system) process pid has used, from
// /proc/PID/stat in clock ticks of 10 ms (Linux's USER_HZ of 100); -1 when
// it cannot be read.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	i := bytes.LastIndexByte(b, ')') // the command name may hold spaces
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return -1
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14 of stat
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// tracingOn is a TracerProvider that samples every span and exports it to
// nowhere through the SDK's batch processor: the host's whole cost of
// tracing a call, without a collector's. Shut down when b ends.
func tracingOn(b *testing.B) trace.TracerProvider {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discardExporter{}))
	b.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp
}

// discardExporter exports spans to nowhere.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkSkulkSmallStreamTraced is BenchmarkSkulkSmallStream with
// tracing on (tracingOn): one span for the whole stream.
func BenchmarkSkulkSmallStreamTraced(b *testing.B) {
	benchSkulkTraced(b, tracingOn(b), func(ctx context.Context, ss *skulkSession, n int) error { return ss.smallStream(ctx, n) })
}

// BenchmarkSkulkCallTraced is BenchmarkSkulkCall with tracing on
// (tracingOn): a span, and a trace map in the invoke, per call.
func BenchmarkSkulkCallTraced(b *testing.B) {
	tp := tracingOn(b)
	benchSkulkTraced(b, tp, func(ctx context.Context, ss *skulkSession, n int) error {
		for range n {
			if err := ss.call(ctx); err != nil {
				return err
			}
		}
		return nil
	})
}

// BenchmarkSkulkSmallStream: one op is one 64-byte frame of a count call.
func BenchmarkSkulkSmallStream(b *testing.B) {
	benchSkulk(b, func(ctx context.Context, ss *skulkSession, n int) error { return ss.smallStream(ctx, n) })
}

// BenchmarkSkulkDemoSmallStream is BenchmarkSkulkSmallStream against the
// project's cmd/skulk-child (the compare run's skulk-demo column): its count
// declares an output schema the host checks on every frame.
func BenchmarkSkulkDemoSmallStream(b *testing.B) {
	sys := &skulkSystem{sys: SkulkDemo, bin: bins.SkulkDemo, dir: b.TempDir(), env: strings.Fields(os.Getenv(childEnvVar))}
	benchSkulkSystem(b, sys, func(ctx context.Context, ss *skulkSession, n int) error { return ss.smallStream(ctx, n) })
}

// BenchmarkSkulkSmallStreamPlain is BenchmarkSkulkSmallStream made as a
// plain request (WithInput()): the caller reads the stream itself.
func BenchmarkSkulkSmallStreamPlain(b *testing.B) {
	benchSkulk(b, func(ctx context.Context, ss *skulkSession, n int) error {
		return ss.smallStreamWith(ctx, n, host.WithInput())
	})
}

// BenchmarkSkulkMedia: one op is one 1 MiB inline chunk.
func BenchmarkSkulkMedia(b *testing.B) {
	b.SetBytes(mediaChunk)
	benchSkulk(b, func(ctx context.Context, ss *skulkSession, n int) error { return ss.media(ctx, n, mediaChunk) })
}

// BenchmarkSkulkMediaSmall: one op is one inline chunk of 64 bytes, or
// of 1 KiB: the frame-size sweep's small points, where each chunk is a
// packet with an attachment of its own.
func BenchmarkSkulkMediaSmall(b *testing.B) {
	for _, size := range []int{64, 1 << 10} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			benchSkulk(b, func(ctx context.Context, ss *skulkSession, n int) error { return ss.media(ctx, n, size) })
		})
	}
}

// BenchmarkSkulkEcho: one op is one 64-byte frame sent and echoed.
func BenchmarkSkulkEcho(b *testing.B) {
	benchSkulk(b, func(ctx context.Context, ss *skulkSession, n int) error { return ss.echo(ctx, n) })
}

// BenchmarkSkulkCall: one op is one sequential small call, made with a
// context that has a deadline (5 minutes away), as the compare run does:
// the child gets it as timeout_ms.
func BenchmarkSkulkCall(b *testing.B) {
	benchSkulkCalls(b, func(ctx context.Context, ss *skulkSession) error { return ss.call(ctx) })
}

// BenchmarkSkulkUnary: one op is one unary call.
func BenchmarkSkulkUnary(b *testing.B) {
	benchSkulkCalls(b, func(ctx context.Context, ss *skulkSession) error { return ss.unary(ctx) })
}

// BenchmarkSkulkUnaryNoDeadline is BenchmarkSkulkUnary with a context
// that has no deadline.
func BenchmarkSkulkUnaryNoDeadline(b *testing.B) {
	benchSkulkCalls(b, func(_ context.Context, ss *skulkSession) error { return ss.unary(context.Background()) })
}

// BenchmarkSkulkCallStreamed is BenchmarkSkulkCall with the input sent
// after the call started (Send, CloseSend) rather than with the invoke.
func BenchmarkSkulkCallStreamed(b *testing.B) {
	benchSkulkCalls(b, func(ctx context.Context, ss *skulkSession) error { return ss.callStreamed(ctx) })
}

// BenchmarkSkulkCallNoDeadline is BenchmarkSkulkCall with a context that
// has no deadline: the difference is what a deadline costs a call.
func BenchmarkSkulkCallNoDeadline(b *testing.B) {
	benchSkulkCalls(b, func(_ context.Context, ss *skulkSession) error { return ss.call(context.Background()) })
}

// BenchmarkSkulkNestedHost: one op is one call of the bench child's nest
// tool whose handler calls a host-side Go function through its host (the
// nested workload's first row); BenchmarkSkulkUnary is its baseline.
func BenchmarkSkulkNestedHost(b *testing.B) {
	benchSkulkNested(b, (*skulkNester).nestedHost)
}

// BenchmarkSkulkNestedChild: one op is one call of the nest tool whose
// handler calls the reply tool of the pool's other child through its
// host (the nested workload's second row).
func BenchmarkSkulkNestedChild(b *testing.B) {
	benchSkulkNested(b, (*skulkNester).nestedChild)
}

// benchSkulkNested runs call b.N times on a nested session (openNested:
// two bench children, host_reply and reply offered) and reports the
// host's allocations and CPU per op, the children's CPU, the p50 of the
// host's calls (p50-ns) and that of the nested calls inside them as the
// handler timed them (own-p50-ns).
func benchSkulkNested(b *testing.B, call func(*skulkNester, context.Context) (time.Duration, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sys := &skulkSystem{sys: Skulk, bin: bins.Skulk, dir: b.TempDir(), env: strings.Fields(os.Getenv(childEnvVar))}
	n, err := sys.openNested(ctx)
	require.NoError(b, err)
	defer n.close()
	sn := n.(*skulkNester)
	for range 100 { // warm up: connections, buffers
		_, err := call(sn, ctx)
		require.NoError(b, err)
	}
	pids := sn.pids()
	childCPU := func() time.Duration {
		var t time.Duration
		for _, pid := range pids {
			t += procCPU(pid)
		}
		return t
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	hostCPU, kidsCPU := selfCPU(), childCPU()
	lat := make([]time.Duration, 0, b.N)
	own := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		d, err := call(sn, ctx)
		if err != nil {
			require.FailNow(b, fmt.Sprint(err))
		}
		lat = append(lat, time.Since(t0))
		own = append(own, d)
	}
	b.StopTimer()
	hostCPU, kidsCPU = selfCPU()-hostCPU, childCPU()-kidsCPU
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(percentile(lat, 0.5).Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(percentile(own, 0.5).Nanoseconds()), "own-p50-ns")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N), "host-allocs/op")
	b.ReportMetric(float64(hostCPU.Nanoseconds())/float64(b.N), "host-cpu-ns/op")
	b.ReportMetric(float64(kidsCPU.Nanoseconds())/float64(b.N), "child-cpu-ns/op")
}

// benchSkulkCalls is benchSkulk for an op that is one call; it also
// reports the calls' median time (p50-ns), which the nested benchmarks
// report too, so that a nested call's p50 can be set against a host-made
// call's as the compare run's nested targets do.
func benchSkulkCalls(b *testing.B, call func(context.Context, *skulkSession) error) {
	var lat []time.Duration
	benchSkulk(b, func(ctx context.Context, ss *skulkSession, n int) error {
		lat = slices.Grow(lat[:0], n)
		for range n {
			t0 := time.Now()
			if err := call(ctx, ss); err != nil {
				return err
			}
			lat = append(lat, time.Since(t0))
		}
		return nil
	})
	if len(lat) > 0 {
		b.ReportMetric(float64(percentile(lat, 0.5).Nanoseconds()), "p50-ns")
	}
}

// BenchmarkWireCall: one op is the sequential call of BenchmarkSkulkCall
// (echo, one 64-byte chunk, completed, read to the end) driven at the wire
// level by the benchmark goroutine itself: invoke, started, the chunk and
// completed in one write, then the child's frames and end read on the same
// goroutine. It is the floor a host with no goroutine of its own in the
// path would reach against the same child; BenchmarkSkulkCall minus this is
// the host package's share of a call.
func BenchmarkWireCall(b *testing.B) { benchWireCall(b, 0) }

// BenchmarkWireCallDeadline is BenchmarkWireCall with the invoke's
// timeout_ms set to 5 minutes, as BenchmarkSkulkCall's context gives it:
// the difference is what a deadline costs the child.
func BenchmarkWireCallDeadline(b *testing.B) { benchWireCall(b, 5*60*1000) }

// benchWireCall runs BenchmarkWireCall with invokes of timeout_ms
// timeoutMS (0: none).
func benchWireCall(b *testing.B, timeoutMS int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	wc, err := startWireChild(ctx, bins.Skulk, b.TempDir())
	require.NoError(b, err)
	defer wc.close()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", wc.sock)
	require.NoError(b, err)
	defer conn.Close()
	r := packetio.NewReader(conn, wc.limits)
	var buf []byte
	call := func(i int) {
		id := "w" + strconv.Itoa(i)
		started, _ := frame.NewStarted(id, frame.CallerToProvider)
		chunk, _ := frame.NewChunk(id, frame.CallerToProvider, 1, smallPayload, nil)
		done, _ := frame.NewCompleted(id, frame.CallerToProvider, 2, nil)
		buf = buf[:0]
		for _, p := range []wire.Packet{&wire.Invoke{CallID: id, ToolID: "echo", Arguments: frame.Payload{0x80}, TimeoutMS: timeoutMS},
			&wire.Frame{Frame: started}, &wire.Frame{Frame: chunk}, &wire.Frame{Frame: done}} {
			if buf, _, err = wire.AppendPacket(buf, p, wc.limits); err != nil {
				require.FailNow(b, fmt.Sprint(err))
			}
		}
		if _, err := conn.Write(buf); err != nil {
			require.FailNow(b, fmt.Sprint(err))
		}
		for {
			p, err := r.ReadPacket()
			require.NoError(b, err)
			if _, ok := p.(*wire.End); ok {
				return
			}
		}
	}
	for i := range 100 { // warm up
		call(i)
	}
	b.ResetTimer()
	for i := range b.N {
		call(100 + i)
	}
}

// BenchmarkRawCall: one op is the raw baseline's call, a 64-byte ping-pong
// round trip: the denominator of the call targets, in the same run as the
// call benchmarks above.
func BenchmarkRawCall(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rs, err := (&rawSystem{bin: bins.Raw, dir: b.TempDir()}).start(ctx)
	require.NoError(b, err)
	defer rs.close()
	benchCalls(b, func() error { return rs.call(ctx) })
}

// BenchmarkGoPluginCall: one op is go-plugin's unary call of 64 bytes.
func BenchmarkGoPluginCall(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	gs, err := (&grpcSystem{bin: bins.GoPlugin, dir: b.TempDir()}).start()
	require.NoError(b, err)
	defer gs.close()
	benchCalls(b, func() error { return gs.call(ctx) })
}

// benchCalls warms call up with 100 calls, then times b.N of them.
func benchCalls(b *testing.B, call func() error) {
	for range 100 {
		require.NoError(b, call())
	}
	b.ResetTimer()
	for range b.N {
		require.NoError(b, call())
	}
}

// idleGap is how long BenchmarkAfterIdle leaves both processes idle before
// each call: long enough for their threads to park and the runtime's
// sysmon to slow down, as between the calls of a user who calls now and
// then.
const idleGap = 5 * time.Millisecond

// BenchmarkAfterIdle: one op is one call made after idleGap of nothing
// (not timed), for Skulk's unary call, the raw ping-pong and go-plugin's
// unary call. The compare run's call rows are back to back; this is the
// same call as a sporadic caller sees it.
func BenchmarkAfterIdle(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	idle := func(b *testing.B, call func() error) {
		for range 100 {
			require.NoError(b, call())
		}
		b.ResetTimer()
		for range b.N {
			b.StopTimer()
			time.Sleep(idleGap)
			b.StartTimer()
			require.NoError(b, call())
		}
	}
	b.Run("skulk-unary", func(b *testing.B) {
		ss, err := (&skulkSystem{sys: Skulk, bin: bins.Skulk, dir: b.TempDir()}).start(ctx)
		require.NoError(b, err)
		defer ss.close()
		idle(b, func() error { return ss.unary(ctx) })
	})
	b.Run("raw", func(b *testing.B) {
		rs, err := (&rawSystem{bin: bins.Raw, dir: b.TempDir()}).start(ctx)
		require.NoError(b, err)
		defer rs.close()
		idle(b, func() error { return rs.call(ctx) })
	})
	b.Run("go-plugin", func(b *testing.B) {
		gs, err := (&grpcSystem{bin: bins.GoPlugin, dir: b.TempDir()}).start()
		require.NoError(b, err)
		defer gs.close()
		idle(b, func() error { return gs.call(ctx) })
	})
}

// BenchmarkColdStart: one op is a child started, called once and stopped,
// timed from the start to the call's success (the compare run's start
// row): coldStart of each system, side by side.
func BenchmarkColdStart(b *testing.B) {
	for _, s := range []system{
		&skulkSystem{sys: Skulk, bin: bins.Skulk, dir: b.TempDir()},
		&rawSystem{bin: bins.Raw, dir: b.TempDir()},
		&grpcSystem{bin: bins.GoPlugin, dir: b.TempDir()},
	} {
		b.Run(s.name(), func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			var total time.Duration
			for range b.N {
				d, err := s.coldStart(ctx)
				require.NoError(b, err)
				total += d
			}
			b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs-to-first-call/op")
		})
	}
}

// BenchmarkSkulkHealthBackpressured is the health workload as a benchmark:
// 8 count streams left unread until the child's writes block, then pings
// on the control connection at the wire level, b.N of them: p50-ms and
// p99-ms report their round trips (ns/op includes the child's start and
// the streams' setup, so read the two metrics). SKULK_BENCH_CHILD points it
// at another child (the Python SDK's bench child, say).
func BenchmarkSkulkHealthBackpressured(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ds, err := healthWire(ctx, bins.Skulk, b.TempDir(), 8, b.N)
	require.NoError(b, err)
	b.ReportMetric(float64(percentile(ds, 0.5).Microseconds())/1e3, "p50-ms")
	b.ReportMetric(float64(percentile(ds, 0.99).Microseconds())/1e3, "p99-ms")
}
