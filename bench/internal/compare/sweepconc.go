package compare

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skulkrt/skulk/bench/internal/cpuacct"
)

// endless is the frame count of a stream a sweep stops by cancelling it.
const endless = 1 << 31

// hostMem returns the host's live heap and goroutine stacks after a
// garbage collection: what the process holds. The heap is what the
// collection marked live, not HeapAlloc, which also counts what the
// running streams allocated after it ended, garbage included.
func hostMem() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	return int64(live[0].Value.Uint64() + ms.StackInuse)
}

// counter is a frame counter of one stream, padded to its own cache line
// so that the streams' goroutines do not share one.
type counter struct {
	n atomic.Int64
	_ [56]byte
}

func sum(cs []counter) int64 {
	var t int64
	for i := range cs {
		t += cs[i].n.Load()
	}
	return t
}

func (sw *sweeper) concurrency(ctx context.Context) (Sweep, error) {
	p := sw.p
	rec := newSweepRec("concurrency", "concurrent streams of 64-byte frames child→host", "concurrent streams", "streams",
		floats(p.concurrency), sw.names, sw.log,
		curveSpec{"frames", "aggregate frames/s", "frames/s", true},
		curveSpec{"cpu-per-frame", "CPU per frame, host + children", "ns", false},
		curveSpec{"host-cpu-per-frame", "host CPU per frame", "ns", false},
		curveSpec{"child-cpu-per-frame", "children's CPU per frame", "ns", false},
		curveSpec{"probe-p50", "small call p50 alongside the streams", "µs", false},
		curveSpec{"probe-p99", "small call p99 alongside the streams", "µs", false},
		curveSpec{"host-mem-per-stream", "host memory per open stream (heap + stacks)", "KiB", false},
		curveSpec{"child-rss", "child RSS", "MiB", false},
		curveSpec{"host-goroutines", "host goroutines added", "goroutines", false},
		curveSpec{"host-fds", "host file descriptors added", "fds", false},
		curveSpec{"child-fds", "child file descriptors", "fds", false},
	)
	for range p.concRounds {
		for _, n := range p.concurrency {
			for _, s := range sw.systems {
				if rec.failed(s.name(), float64(n)) || ctx.Err() != nil {
					continue
				}
				if s.name() == "raw" {
					rec.fail(s.name(), float64(n), notApplicable("a raw socket is one stream; N streams would be N sockets with no runtime between them"))
					continue
				}
				pctx, cancel := context.WithTimeout(ctx, p.timeout)
				err := sw.concurrencyPoint(pctx, rec, s, n)
				cancel()
				if err != nil {
					rec.fail(s.name(), float64(n), err)
				}
			}
		}
	}
	return rec.done(), ctx.Err()
}

func (sw *sweeper) concurrencyPoint(ctx context.Context, rec *sweepRec, s system, n int) error {
	sess, err := s.open(ctx)
	if err != nil {
		return err
	}
	defer sess.close()
	st := sess.(streamer)
	// One small call first: the child's first call warms what every later
	// one reuses.
	if err := st.call(ctx); err != nil {
		return fmt.Errorf("first call: %w", err)
	}
	mem0, g0 := hostMem(), runtime.NumGoroutine()
	fd0, err := cpuacct.FDs(0)
	if err != nil {
		return err
	}

	counts := make([]counter, n)
	errs := make([]error, n)
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	stopAll := func() error { stop(); wg.Wait(); return streamErrs(errs) }
	// Every stream asked for first, then every one read at once.
	reads := make([]func(func()) error, n)
	topen := time.Now()
	for i := range n {
		if reads[i], err = st.openStream(sctx, endless); err != nil {
			stop()
			for _, r := range reads[:i] { // each ends at once: sctx is done
				r(func() {})
			}
			return fmt.Errorf("opening stream %d of %d: %w", i+1, n, err)
		}
	}
	fmt.Fprintf(sw.log, "  %-12s %-10s %-6d %d streams opened in %v\n", "concurrency", s.name(), n, n, time.Since(topen).Round(time.Millisecond))
	for i := range n {
		wg.Go(func() { // ends when stop cancels sctx (or the stream fails); waited for below
			errs[i] = reads[i](func() { counts[i].n.Add(1) })
		})
	}

	// Every stream open and delivering before the window starts.
	for open := 0; open < n; {
		open = 0
		for i := range counts {
			if counts[i].n.Load() > 0 {
				open++
			}
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%d of %d streams delivered a frame: %w", open, n, errors.Join(err, stopAll()))
		}
		time.Sleep(5 * time.Millisecond)
	}
	m, err := cpuacct.Start(st.pids()...)
	if err != nil {
		return errors.Join(err, stopAll())
	}
	f0 := sum(counts)
	var lat []time.Duration
	var perr error
	for t0 := time.Now(); time.Since(t0) < sw.p.window; {
		c0 := time.Now()
		if perr = st.call(ctx); perr != nil {
			break
		}
		lat = append(lat, time.Since(c0))
	}
	frames := sum(counts) - f0
	u, err := m.Stop()
	if err := errors.Join(perr, err); err != nil {
		return errors.Join(err, stopAll())
	}
	// While every stream is still open: what they hold.
	mem1, g1 := hostMem(), runtime.NumGoroutine()
	fd1, err1 := cpuacct.FDs(0)
	var rss int64
	var cfds int
	for _, pid := range st.pids() {
		r, err := cpuacct.RSS(pid)
		f, err2 := cpuacct.FDs(pid)
		err1 = errors.Join(err1, err, err2)
		rss, cfds = rss+r, cfds+f
	}
	if err := errors.Join(err1, stopAll()); err != nil {
		return err
	}
	if frames <= 0 {
		return errors.New("no frame arrived in the window")
	}
	x, name := float64(n), s.name()
	rec.set("frames", name, x, float64(frames)/u.Wall.Seconds())
	rec.set("cpu-per-frame", name, x, float64(u.Total().Nanoseconds())/float64(frames))
	rec.set("host-cpu-per-frame", name, x, float64(u.Host.Nanoseconds())/float64(frames))
	rec.set("child-cpu-per-frame", name, x, float64(u.Children.Nanoseconds())/float64(frames))
	rec.set("probe-p50", name, x, us(percentile(lat, 0.50)))
	rec.set("probe-p99", name, x, us(percentile(lat, 0.99)))
	rec.set("host-mem-per-stream", name, x, float64(mem1-mem0)/float64(n)/1024)
	rec.set("child-rss", name, x, float64(rss)/(1<<20))
	rec.set("host-goroutines", name, x, float64(g1-g0))
	rec.set("host-fds", name, x, float64(fd1-fd0))
	rec.set("child-fds", name, x, float64(cfds))
	fmt.Fprintf(sw.log, "  %-12s %-10s %-6d %.4g frames/s, %.0f ns CPU/frame, probe p50 %.0f µs (%d calls), host %+.1f KiB/stream\n",
		"concurrency", name, n, float64(frames)/u.Wall.Seconds(), float64(u.Total().Nanoseconds())/float64(frames),
		us(percentile(lat, 0.5)), len(lat), float64(mem1-mem0)/float64(n)/1024)
	return nil
}

// streamErrs sums up the errors of a point's streams: nil when none
// failed, else how many failed and the first one's error (thousands of
// streams fail alike when the child does).
func streamErrs(errs []error) error {
	var first error
	failed := 0
	for _, err := range errs {
		if err != nil && first == nil {
			first = err
		}
		if err != nil {
			failed++
		}
	}
	if failed == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d streams failed, the first: %w", failed, len(errs), first)
}
