// Package compare runs the side-by-side benchmarks of Skulk against
// hashicorp/go-plugin (gRPC), MCP over stdio and raw Unix sockets, and
// reports each system's figures and Skulk's advantage over each.
//
// Every workload runs every system in one invocation, interleaved round by
// round (A B C D A B C D …), after one calibration run per system that also
// warms it up. Every child is a real process built once per run; every loop
// is bounded by a count and by its context's deadline; only Unix sockets
// and pipes are used.
package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/skulkrt/skulk/bench/internal/cpuacct"
)

// Options configure a run. The zero value is the full run.
type Options struct {
	// Quick selects the short run (under a minute on 2 cores).
	Quick bool
	// Bin names the built children (see Build).
	Bin Binaries
	// Dir is a private directory for sockets; it must exist.
	Dir string
	// Systems, if not empty, limits the run to these system names.
	Systems []string
	// Workloads, if not empty, limits the run to these workload ids.
	Workloads []string
	// SkulkEnv are "NAME=value" pairs set in the environment of the
	// skulk system's children (SKULK_BENCH_PROFILE, say).
	SkulkEnv []string
	// Revision is the main module's git revision, for the report.
	Revision string
	// Log receives one progress line per measurement; nil discards them.
	Log io.Writer

	sizes *plan // the sweeps and the tests size the run; nil means Quick's or the full plan
}

// plan sizes a run.
type plan struct {
	rounds       int           // measured rounds of the throughput and latency workloads
	target       time.Duration // how long one throughput or latency measurement lasts
	startRounds  int           // rounds of start-to-first-call and crash detection
	healthRounds int
	healthPings  int
	healthStream int // streams blocked during the health workload
	timeout      time.Duration
}

func (o *Options) plan() plan {
	if o.sizes != nil {
		return *o.sizes
	}
	if o.Quick {
		return plan{rounds: 3, target: 250 * time.Millisecond, startRounds: 3,
			healthRounds: 2, healthPings: 50, healthStream: 8, timeout: 30 * time.Second}
	}
	return plan{rounds: 9, target: time.Second, startRounds: 21,
		healthRounds: 7, healthPings: 400, healthStream: 8, timeout: 60 * time.Second}
}

// Upper bounds of the calibrated counts, whatever the calibration says.
const (
	maxFrames = 20_000_000
	maxChunks = 8192 // 8 GiB of media
	maxCalls  = 2_000_000
)

// metricSpec describes one row of the report.
type metricSpec struct {
	id, title, unit string
	higherBetter    bool
}

var (
	mSmall   = metricSpec{"small-stream", "small-frame stream child→host (64 B)", "frames/s", true}
	mMedia   = metricSpec{"media", "inline binary 1 MiB chunks child→host", "MB/s", true}
	mEcho    = metricSpec{"echo", "bidirectional echo of small frames", "frames/s", true}
	mCall50  = metricSpec{"call-p50", "sequential small calls p50", "µs", false}
	mCall99  = metricSpec{"call-p99", "sequential small calls p99", "µs", false}
	mUnary50 = metricSpec{"unary-p50", "sequential unary calls p50 (value in, value out)", "µs", false}
	mUnary99 = metricSpec{"unary-p99", "sequential unary calls p99 (value in, value out)", "µs", false}
	mStart   = metricSpec{"start", "child start to first successful call", "ms", false}
	mCrash   = metricSpec{"crash", "crash detection (SIGKILL → caller sees failure)", "ms", false}
	mHealth  = metricSpec{"health-p99", "health-ping p99, every stream backpressured", "ms", false}
)

// cpuSpec is the CPU row of a workload: the user+system CPU time of the
// host (this process) and of the session's children per unit of the
// workload's work, in the row's unit.
type cpuSpec struct {
	metricSpec
	of  string        // the id of the workload's first row, the one the CPU row costs
	per time.Duration // the time unit of the row: ns, µs or ms per unit of work
}

var (
	cSmall = cpuSpec{metricSpec{"small-stream-cpu", "CPU per frame, host + children", "ns/frame", false}, mSmall.id, time.Nanosecond}
	cMedia = cpuSpec{metricSpec{"media-cpu", "CPU per MiB, host + children", "ms/MiB", false}, mMedia.id, time.Millisecond}
	cEcho  = cpuSpec{metricSpec{"echo-cpu", "CPU per echoed frame, host + children", "ns/frame", false}, mEcho.id, time.Nanosecond}
	cCall  = cpuSpec{metricSpec{"call-cpu", "CPU per call, host + children", "µs/call", false}, mCall50.id, time.Microsecond}
	cUnary = cpuSpec{metricSpec{"unary-cpu", "CPU per unary call, host + children", "µs/call", false}, mUnary50.id, time.Microsecond}
)

// WorkloadIDs are the workloads in run order: what Options.Workloads names.
var WorkloadIDs = []string{"small-stream", "media", "echo", "calls", "unary", "nested", "start", "crash", "health"}

// sample is one round's values, one per metric of the workload.
type sample []float64

// Run runs the benchmarks and returns the report.
func Run(ctx context.Context, o Options) (*Report, error) {
	systems := o.systems()
	if len(systems) == 0 {
		return nil, errors.New("compare: no system selected")
	}
	p := o.plan()
	log := o.Log
	if log == nil {
		log = io.Discard
	}
	r := &runner{o: o, p: p, log: log, systems: systems, res: make(map[string]map[string]*Figure), cpuOf: make(map[string]string), loadStart: loadavg()}
	started := time.Now()
	sessions := make([]session, len(systems))
	defer func() {
		for _, s := range sessions {
			if s != nil {
				s.close()
			}
		}
	}()
	needSessions := false
	for _, w := range []string{"small-stream", "media", "echo", "calls", "unary"} {
		needSessions = needSessions || r.wants(w)
	}
	if needSessions {
		for i, s := range systems {
			sctx, cancel := context.WithTimeout(ctx, p.timeout)
			sess, err := s.open(sctx)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("%s: start: %w", s.name(), err)
			}
			sessions[i] = sess
		}
	}
	if r.wants("small-stream") {
		r.throughput(ctx, mSmall, cSmall, sessions, 2000, maxFrames, func(ctx context.Context, s session, n int) (float64, error) {
			d, err := timed(func() error { return s.smallStream(ctx, n) })
			return float64(n) / d.Seconds(), err
		})
	}
	if r.wants("media") {
		r.throughput(ctx, mMedia, cMedia, sessions, 4, maxChunks, func(ctx context.Context, s session, n int) (float64, error) {
			d, err := timed(func() error { return s.media(ctx, n, mediaChunk) })
			return float64(n) * mediaChunk / d.Seconds() / 1e6, err
		})
	}
	if r.wants("echo") {
		r.throughput(ctx, mEcho, cEcho, sessions, 1000, maxFrames, func(ctx context.Context, s session, n int) (float64, error) {
			d, err := timed(func() error { return s.echo(ctx, n) })
			return float64(n) / d.Seconds(), err
		})
	}
	if r.wants("calls") {
		r.calls(ctx, sessions, mCall50, mCall99, cCall, session.call)
	}
	if r.wants("unary") {
		r.calls(ctx, sessions, mUnary50, mUnary99, cUnary, session.unary)
	}
	if r.wants("nested") {
		r.nested(ctx)
	}
	if r.wants("start") {
		r.single(ctx, mStart, p.startRounds, func(ctx context.Context, s system) (float64, error) {
			d, err := s.coldStart(ctx)
			return ms(d), err
		})
	}
	if r.wants("crash") {
		r.single(ctx, mCrash, p.startRounds, func(ctx context.Context, s system) (float64, error) {
			d, err := s.crash(ctx)
			return ms(d), err
		})
	}
	if r.wants("health") {
		r.single(ctx, mHealth, p.healthRounds, func(ctx context.Context, s system) (float64, error) {
			ds, err := s.healthUnderBackpressure(ctx, p.healthStream, p.healthPings)
			if err != nil {
				return 0, err
			}
			return ms(percentile(ds, 0.99)), nil
		})
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return r.report(time.Since(started)), nil
}

// runner holds a run's state. It is used by one goroutine.
type runner struct {
	o         Options
	p         plan
	log       io.Writer
	systems   []system
	order     []metricSpec
	res       map[string]map[string]*Figure // metric id → system name → Figure
	cpuOf     map[string]string             // CPU row id → the id of the row it costs
	loadStart string
}

func (r *runner) wants(w string) bool {
	return len(r.o.Workloads) == 0 || slices.Contains(r.o.Workloads, w)
}

func (r *runner) fig(m metricSpec, sys string) *Figure {
	byID := r.res[m.id]
	if byID == nil {
		byID = make(map[string]*Figure)
		r.res[m.id] = byID
		r.order = append(r.order, m)
	}
	f := byID[sys]
	if f == nil {
		f = &Figure{System: sys}
		byID[sys] = f
	}
	return f
}

// record adds a measured value or the error that stopped it; after an
// error a system takes no further part in that metric.
func (r *runner) record(m metricSpec, sys string, v float64, err error) {
	f := r.fig(m, sys)
	switch {
	case errors.Is(err, errNotApplicable):
		f.NA = err.Error()
	case err != nil:
		f.Err = err.Error()
	default:
		f.Samples = append(f.Samples, v)
	}
	status := fmt.Sprintf("%.4g %s", v, m.unit)
	if err != nil {
		status = err.Error()
	}
	fmt.Fprintf(r.log, "  %-12s %-10s %s\n", m.id, sys, status)
}

// meter starts measuring the CPU time of this process and of sess's
// children.
func meter(sess session) (*cpuacct.Meter, error) {
	p, ok := sess.(interface{ pids() []int })
	if !ok {
		return nil, notApplicable("the session names no child process")
	}
	return cpuacct.Start(p.pids()...)
}

// measured stops m, started before units of work that ended with err,
// and returns what they used; an error when the work or either reading
// failed.
func measured(m *cpuacct.Meter, merr error, units int, err error) (cpuacct.Usage, error) {
	if err := errors.Join(err, merr); err != nil {
		return cpuacct.Usage{}, err
	}
	u, err := m.Stop()
	if err == nil && units <= 0 {
		err = errors.New("no unit of work measured")
	}
	return u, err
}

// recordCPU adds one round's CPU time per unit of work (u over units) to
// c's row, or the error that stopped the round.
func (r *runner) recordCPU(c cpuSpec, sys string, u cpuacct.Usage, units int, err error) {
	r.cpuOf[c.id] = c.of
	f := r.fig(c.metricSpec, sys)
	switch {
	case errors.Is(err, errNotApplicable):
		f.NA = err.Error()
		return
	case err != nil:
		f.Err = err.Error()
		return
	}
	per := func(d time.Duration) float64 { return float64(d) / float64(c.per) / float64(units) }
	f.Samples = append(f.Samples, per(u.Total()))
	f.HostCPUSamples = append(f.HostCPUSamples, per(u.Host))
	f.ChildCPUSamples = append(f.ChildCPUSamples, per(u.Children))
	fmt.Fprintf(r.log, "  %-12s %-10s %.4g %s (host %.4g, children %.4g)\n", c.id, sys, per(u.Total()), c.unit, per(u.Host), per(u.Children))
}

func (r *runner) failed(m metricSpec, sys string) bool {
	f := r.fig(m, sys)
	return f.Err != "" || f.NA != ""
}

// throughput calibrates a count per system (a run of n0 that also warms up),
// then measures rounds runs of it, interleaved across systems, and the CPU
// time of each run per frame, chunk or MiB as the row cpu.
func (r *runner) throughput(ctx context.Context, m metricSpec, cpu cpuSpec, sessions []session, n0, nmax int,
	measure func(context.Context, session, int) (float64, error)) {
	counts := make([]int, len(r.systems))
	for i, s := range r.systems {
		mctx, cancel := context.WithTimeout(ctx, r.p.timeout)
		d, err := timed(func() error { _, err := measure(mctx, sessions[i], n0); return err })
		cancel()
		if err != nil {
			r.record(m, s.name(), 0, fmt.Errorf("calibration: %w", err))
			continue
		}
		n := int(float64(n0) * r.p.target.Seconds() / max(d.Seconds(), 1e-6))
		counts[i] = min(max(n, n0), nmax)
		r.fig(m, s.name()).Count = counts[i]
	}
	for range r.p.rounds {
		for i, s := range r.systems {
			if r.failed(m, s.name()) || ctx.Err() != nil {
				continue
			}
			mctx, cancel := context.WithTimeout(ctx, r.p.timeout)
			cm, merr := meter(sessions[i])
			v, err := measure(mctx, sessions[i], counts[i])
			u, uerr := measured(cm, merr, counts[i], err)
			cancel()
			r.record(m, s.name(), v, err)
			r.recordCPU(cpu, s.name(), u, counts[i], uerr)
		}
	}
}

// calls measures sequential small calls made with call: each round times
// counts[i] calls one by one and records their p50 as m50 and p99 as m99,
// and their CPU time per call as cpu.
func (r *runner) calls(ctx context.Context, sessions []session, m50, m99 metricSpec, cpu cpuSpec, call func(session, context.Context) error) {
	r.timedCalls(ctx, sessions, callRows{m50: m50, m99: m99, cpu: cpu}, func(s session, ctx context.Context) (time.Duration, error) {
		return 0, call(s, ctx)
	})
}

// callRows are the rows of a calls workload: each call's p50 and p99 as
// the host times it, and CPU per call; own50 and own99, where their ids
// are set, are the p50 and p99 of the durations call returns (the
// nested call inside each call, as its caller timed it).
type callRows struct {
	m50, m99     metricSpec
	cpu          cpuSpec
	own50, own99 metricSpec
}

// timedCalls is calls with the rows of rows: call returns what goes into
// own50 and own99.
func (r *runner) timedCalls(ctx context.Context, sessions []session, rows callRows, call func(session, context.Context) (time.Duration, error)) {
	const n0 = 200
	m50, m99 := rows.m50, rows.m99
	hasOwn := rows.own50.id != ""
	counts := make([]int, len(r.systems))
	lat := make([]time.Duration, 0, maxCalls)
	var own []time.Duration
	if hasOwn {
		own = make([]time.Duration, 0, maxCalls)
	}
	run := func(ctx context.Context, s session, n int) error {
		lat, own = lat[:0], own[:0]
		for i := 0; i < n; i++ {
			t0 := time.Now()
			d, err := call(s, ctx)
			if err != nil {
				return err
			}
			lat = append(lat, time.Since(t0))
			if hasOwn {
				own = append(own, d)
			}
		}
		return nil
	}
	for i, s := range r.systems {
		mctx, cancel := context.WithTimeout(ctx, r.p.timeout)
		d, err := timed(func() error { return run(mctx, sessions[i], n0) })
		cancel()
		if err != nil {
			for _, m := range []metricSpec{m50, m99, rows.own50, rows.own99} {
				if m.id != "" {
					r.record(m, s.name(), 0, fmt.Errorf("calibration: %w", err))
				}
			}
			continue
		}
		n := int(float64(n0) * r.p.target.Seconds() / max(d.Seconds(), 1e-6))
		counts[i] = min(max(n, n0), maxCalls)
		for _, m := range []metricSpec{m50, m99, rows.own50, rows.own99} {
			if m.id != "" {
				r.fig(m, s.name()).Count = counts[i]
			}
		}
	}
	for range r.p.rounds {
		for i, s := range r.systems {
			if r.failed(m50, s.name()) || ctx.Err() != nil {
				continue
			}
			mctx, cancel := context.WithTimeout(ctx, r.p.timeout)
			cm, merr := meter(sessions[i])
			err := run(mctx, sessions[i], counts[i])
			u, uerr := measured(cm, merr, counts[i], err)
			cancel()
			r.record(m50, s.name(), us(percentile(lat, 0.50)), err)
			r.record(m99, s.name(), us(percentile(lat, 0.99)), err)
			if hasOwn {
				r.record(rows.own50, s.name(), us(percentile(own, 0.50)), err)
				r.record(rows.own99, s.name(), us(percentile(own, 0.99)), err)
			}
			r.recordCPU(rows.cpu, s.name(), u, counts[i], uerr)
		}
	}
}

// single measures a workload that starts its own child, rounds times per
// system, interleaved.
func (r *runner) single(ctx context.Context, m metricSpec, rounds int, measure func(context.Context, system) (float64, error)) {
	for range rounds {
		for _, s := range r.systems {
			if r.failed(m, s.name()) || ctx.Err() != nil {
				continue
			}
			mctx, cancel := context.WithTimeout(ctx, r.p.timeout)
			v, err := measure(mctx, s)
			cancel()
			r.record(m, s.name(), v, err)
		}
	}
}

func timed(f func() error) (time.Duration, error) {
	t0 := time.Now()
	err := f()
	return time.Since(t0), err
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// percentile returns the q-quantile of ds (nearest rank) without reordering
// ds; 0 for none.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// settleTime is how long the health workload waits, after every stream has
// delivered its first frame and stopped being read, for the child's writes
// to fill the socket buffers and block.
const settleTime = 200 * time.Millisecond

func settle(ctx context.Context) error {
	t := time.NewTimer(settleTime)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
