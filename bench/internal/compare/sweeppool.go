package compare

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skulkrt/skulk/bench/internal/cpuacct"
)

func (sw *sweeper) pool(ctx context.Context) (Sweep, error) {
	p := sw.p
	rec := newSweepRec("pool", "a pool of children behind one host", "children", "children",
		floats(p.pools), sw.names, sw.log,
		curveSpec{"calls", "small calls/s from 16 callers", "calls/s", true},
		curveSpec{"cpu-per-call", "CPU per call, host + children", "µs", false},
		curveSpec{"start", "start of the whole pool to ready", "ms", false},
		curveSpec{"start-per-child", "start per child", "ms", false},
		curveSpec{"child-rss", "RSS per child", "MiB", false},
		curveSpec{"idle-cpu", "idle CPU per child (the children's own, to the nanosecond)", "µs/s", false},
	)
	for _, k := range p.pools {
		for _, s := range sw.systems {
			x := float64(k)
			if ctx.Err() != nil {
				break
			}
			if s.name() == "raw" {
				rec.fail(s.name(), x, notApplicable("a raw socket has no protocol to pool children behind"))
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, p.timeout)
			err := sw.poolPoint(pctx, rec, s, k)
			cancel()
			if err != nil {
				rec.fail(s.name(), x, err)
			}
		}
	}
	return rec.done(), ctx.Err()
}

func (sw *sweeper) poolPoint(ctx context.Context, rec *sweepRec, s system, k int) error {
	t0 := time.Now()
	pl, err := openPool(ctx, s, k)
	if err != nil {
		return err
	}
	start := time.Since(t0)
	defer pl.close()
	pids := pl.pids()
	if len(pids) != k {
		return fmt.Errorf("%d children running, want %d", len(pids), k)
	}
	for range 2 * k { // a first call to every child
		if err := pl.call(ctx); err != nil {
			return err
		}
	}

	// Idle: the children's own CPU, read per thread in nanoseconds
	// (cpuacct.OnCPU): an idle child's CPU is wake-ups of microseconds,
	// which the 10 ms ticks of the Meter miss or round up, and the host
	// process the Meter also reads is shared by every system's session.
	// The Meter's reading is kept for the log.
	m, err := cpuacct.Start(pids...)
	if err != nil {
		return err
	}
	idle0, err := onCPU(pids)
	if err != nil {
		return err
	}
	idle := time.NewTimer(sw.p.idle)
	select {
	case <-idle.C:
	case <-ctx.Done():
		idle.Stop()
		return ctx.Err()
	}
	idle1, err := onCPU(pids)
	if err != nil {
		return err
	}
	iu, err := m.Stop()
	if err != nil {
		return err
	}
	idleChild := us(idle1-idle0) / iu.Wall.Seconds() / float64(k)

	m, err = cpuacct.Start(pids...)
	if err != nil {
		return err
	}
	var calls atomic.Int64
	errs := make([]error, sw.p.poolCallers)
	end := time.Now().Add(sw.p.window)
	var wg sync.WaitGroup
	for i := range sw.p.poolCallers {
		wg.Go(func() { // ends at the window's end or the first error; waited for below
			for time.Now().Before(end) {
				if err := pl.call(ctx); err != nil {
					errs[i] = err
					return
				}
				calls.Add(1)
			}
		})
	}
	wg.Wait()
	u, err := m.Stop()
	if err := errors.Join(append(errs, err)...); err != nil {
		return err
	}
	var rss int64
	for _, pid := range pids {
		r, err := cpuacct.RSS(pid)
		if err != nil {
			return err
		}
		rss += r
	}
	x, name, n := float64(k), s.name(), calls.Load()
	if n == 0 {
		return errors.New("no call in the window")
	}
	rec.set("calls", name, x, float64(n)/u.Wall.Seconds())
	rec.set("cpu-per-call", name, x, us(u.Total())/float64(n))
	rec.set("start", name, x, ms(start))
	rec.set("start-per-child", name, x, ms(start)/x)
	rec.set("child-rss", name, x, float64(rss)/x/(1<<20))
	rec.set("idle-cpu", name, x, idleChild)
	fmt.Fprintf(sw.log, "  %-12s %-10s %-3d %.4g calls/s, %.1f µs CPU/call, start %.1f ms, %.1f MiB/child, idle %.0f µs/s/child (host %.0f µs/s)\n",
		"pool", name, k, float64(n)/u.Wall.Seconds(), us(u.Total())/float64(n), ms(start), float64(rss)/x/(1<<20),
		idleChild, us(iu.Host)/iu.Wall.Seconds())
	return nil
}

// onCPU is the on-CPU time of the processes pids, all together
// (cpuacct.OnCPU).
func onCPU(pids []int) (time.Duration, error) {
	var sum time.Duration
	for _, pid := range pids {
		d, err := cpuacct.OnCPU(pid)
		if err != nil {
			return 0, fmt.Errorf("child %d: %w", pid, err)
		}
		sum += d
	}
	return sum, nil
}
