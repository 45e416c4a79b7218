package compare

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/skulkrt/skulk/bench/internal/cpuacct"
)

func (sw *sweeper) longCall(ctx context.Context) (Sweep, error) {
	p := sw.p
	points := make([]float64, p.longSamples)
	for i := range points {
		points[i] = float64(100 * (i + 1) / p.longSamples)
	}
	rec := newSweepRec("long-call", fmt.Sprintf("one call of %d frames of 64 bytes child→host, sampled as it runs", p.longFrames),
		"progress of the call", "%", points, sw.names, sw.log,
		curveSpec{"frames", "frames/s since the previous checkpoint", "frames/s", true},
		curveSpec{"cpu-per-frame", "CPU per frame since the previous checkpoint, host + children", "ns", false},
		curveSpec{"host-heap", "host heap and stacks in use", "MiB", false},
		curveSpec{"child-rss", "child RSS", "MiB", false},
	)
	for _, s := range sw.systems {
		if ctx.Err() != nil {
			break
		}
		if s.name() == "raw" {
			for _, x := range points {
				rec.fail(s.name(), x, notApplicable("a raw socket keeps no state per frame that could grow"))
			}
			continue
		}
		n := p.longFrames
		if s.name() == "mcp" {
			n = p.longMCPFrames
			rec.notes[s.name()] = fmt.Sprintf("%d frames: at MCP's rate (tens of thousands of notifications/s) %d would take minutes of the run's budget", n, p.longFrames)
		}
		pctx, cancel := context.WithTimeout(ctx, p.timeout)
		err := sw.longPoint(pctx, rec, s, n, points)
		cancel()
		if err != nil {
			for _, x := range points {
				if !rec.failed(s.name(), x) {
					rec.fail(s.name(), x, err)
				}
			}
		}
	}
	return rec.done(), ctx.Err()
}

func (sw *sweeper) longPoint(ctx context.Context, rec *sweepRec, s system, n int, points []float64) error {
	sess, err := s.open(ctx)
	if err != nil {
		return err
	}
	defer sess.close()
	st := sess.(streamer)
	pids := st.pids()
	name := s.name()
	every := max(n/len(points), 1)
	got, next := 0, 0
	var serr error
	m, err := cpuacct.Start(pids...)
	if err != nil {
		return err
	}
	last, lastFrames := cpuacct.Usage{}, 0
	sample := func() { // in the receiving goroutine, at each checkpoint
		u, err := m.Stop()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		var rss int64
		for _, pid := range pids {
			r, err2 := cpuacct.RSS(pid)
			err = errors.Join(err, err2)
			rss += r
		}
		if err != nil {
			serr = errors.Join(serr, err)
			return
		}
		x, frames := points[next], float64(got-lastFrames)
		rec.set("frames", name, x, frames/(u.Wall-last.Wall).Seconds())
		rec.set("cpu-per-frame", name, x, float64((u.Total()-last.Total()).Nanoseconds())/frames)
		rec.set("host-heap", name, x, float64(ms.HeapInuse+ms.StackInuse)/(1<<20))
		rec.set("child-rss", name, x, float64(rss)/(1<<20))
		last, lastFrames = u, got
		next++
	}
	t0 := time.Now()
	read, err := st.openStream(ctx, n)
	if err != nil {
		return err
	}
	err = read(func() {
		got++
		if next < len(points) && got == (next+1)*every {
			sample()
		}
	})
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err := errors.Join(err, serr); err != nil {
		return err
	}
	if next != len(points) {
		return fmt.Errorf("%d of %d checkpoints reached (%d frames)", next, len(points), got)
	}
	fmt.Fprintf(sw.log, "  %-12s %-10s %d frames in %v\n", "long-call", name, got, time.Since(t0).Round(time.Millisecond))
	return nil
}
