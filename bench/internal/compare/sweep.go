package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"
)

// SweepOptions configure a run of the sweeps (RunSweeps). The zero value
// is the full run of every sweep against every system that has one.
type SweepOptions struct {
	// Quick selects the short run (under a minute on 2 cores).
	Quick bool
	// Bin names the built children (see Build).
	Bin Binaries
	// Dir is a private directory for sockets and journals; it must exist.
	Dir string
	// Systems, if not empty, limits the run to these system names
	// (skulk, go-plugin, mcp, raw; skulk-demo has no sweeps).
	Systems []string
	// Sweeps, if not empty, limits the run to these sweep ids (SweepIDs).
	Sweeps []string
	// Streams, if not empty, replaces the concurrency sweep's points
	// (numbers of concurrent streams), to measure a few of them quickly.
	Streams []int
	// Revision is the main module's git revision, for the record.
	Revision string
	// Log receives one progress line per point; nil discards them.
	Log io.Writer

	plan *sweepPlan // tests give tiny sizes; nil means Quick's or the full plan
}

// SweepIDs are the sweeps in run order: what SweepOptions.Sweeps names.
var SweepIDs = []string{"calls", "concurrency", "frame-size", "pool", "long-call", "journal"}

// sweepSystems are the systems the sweeps compare, in series order.
var sweepSystems = []string{Skulk, "go-plugin", "mcp", "raw"}

// sweepPlan sizes a run of the sweeps.
type sweepPlan struct {
	concRounds    int           // interleaved rounds of the concurrency points
	rounds        int           // interleaved rounds of the frame-size points
	window        time.Duration // one concurrency or pool measurement
	target        time.Duration // one frame-size measurement
	idle          time.Duration // the pool's idle measurement (pings)
	concurrency   []int
	sizes         []int
	pools         []int
	poolCallers   int // goroutines making calls against a pool
	longFrames    int // the long call's frames
	longMCPFrames int // MCP's long call (see sweepLong)
	longSamples   int // checkpoints of the long call
	journalEvents int
	timeout       time.Duration // bound of one point
	calls         plan          // the calls sweep: the compare run's calls and unary workloads
}

func (o *SweepOptions) sweepPlan() sweepPlan {
	if o.plan != nil {
		return *o.plan
	}
	p := o.basePlan()
	if len(o.Streams) > 0 {
		p.concurrency = o.Streams
	}
	return p
}

func (o *SweepOptions) basePlan() sweepPlan {
	p := sweepPlan{
		concRounds: 1, rounds: 3, window: time.Second, target: 500 * time.Millisecond, idle: time.Second,
		concurrency: []int{1, 8, 64, 512, 4096},
		sizes:       []int{64, 1 << 10, 64 << 10, 1 << 20, 16 << 20},
		pools:       []int{1, 2, 4, 8, 16}, poolCallers: 16,
		longFrames: 10_000_000, longMCPFrames: 200_000, longSamples: 10,
		journalEvents: 1_000_000, timeout: 120 * time.Second,
		calls: plan{rounds: 5, target: 500 * time.Millisecond, timeout: 60 * time.Second},
	}
	if o.Quick {
		p.concRounds, p.rounds, p.window, p.target, p.idle = 1, 1, 150*time.Millisecond, 100*time.Millisecond, 150*time.Millisecond
		p.concurrency, p.sizes, p.pools = []int{1, 64, 512}, []int{64, 64 << 10, 1 << 20}, []int{1, 4}
		p.longFrames, p.longMCPFrames, p.longSamples, p.journalEvents = 200_000, 5_000, 5, 20_000
		p.timeout = 30 * time.Second
		p.calls = plan{rounds: 3, target: 150 * time.Millisecond, timeout: 30 * time.Second}
	}
	return p
}

// SweepReport is a run of the sweeps: the JSON record the charts are drawn
// from (cmd/compare -charts).
type SweepReport struct {
	// Mode is "quick", "full" or "test".
	Mode string `json:"mode"`
	// Started and Duration time the run.
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration_ns"`
	// Machine says where it ran.
	Machine Machine `json:"machine"`
	// Sweeps are the sweeps, in run order.
	Sweeps []Sweep `json:"sweeps"`
	// Targets are the targets of issues 28 and 39 that the sweeps
	// measure, met or missed.
	Targets []Target `json:"targets"`
	// Notes say how each system was driven.
	Notes []string `json:"notes"`
}

// Sweep is one sweep: one quantity varied (its X) and the curves measured
// at each of its points.
type Sweep struct {
	// ID names the sweep (SweepIDs).
	ID string `json:"id"`
	// Title describes it for people.
	Title string `json:"title"`
	// X names the varied quantity and XUnit its unit.
	X     string `json:"x"`
	XUnit string `json:"x_unit"`
	// Points are the values of X the sweep claims: every series of every
	// curve has one Value per point, in this order.
	Points []float64 `json:"points"`
	// Curves are the quantities measured.
	Curves []Curve `json:"curves"`
}

// Curve is one measured quantity of a sweep, one series per system.
type Curve struct {
	// ID names the curve within its sweep; Title describes it.
	ID    string `json:"id"`
	Title string `json:"title"`
	// Unit is the unit of every value.
	Unit string `json:"unit"`
	// HigherBetter is true for rates.
	HigherBetter bool `json:"higher_is_better"`
	// Series are the systems' values.
	Series []Series `json:"series"`
}

// Series is one system's values of a curve.
type Series struct {
	// System names the system.
	System string `json:"system"`
	// Note says how this system ran the sweep when it differs from the
	// others (fewer frames, say); "" when it does not.
	Note string `json:"note,omitempty"`
	// Values are one per point of the sweep.
	Values []Value `json:"values"`
}

// Value is one point of a series: measured (Y, the median of Samples), not
// applicable (NA says why) or failed (Err).
type Value struct {
	// X is the point.
	X float64 `json:"x"`
	// Y is the median of Samples; meaningful only when NA and Err are "".
	Y float64 `json:"y"`
	// Samples are the rounds' values.
	Samples []float64 `json:"samples,omitempty"`
	// NA says why the system cannot do this point.
	NA string `json:"na,omitempty"`
	// Err is the error that stopped the measurement.
	Err string `json:"error,omitempty"`
}

// Measured reports whether v holds a measured Y.
func (v Value) Measured() bool { return v.NA == "" && v.Err == "" && len(v.Samples) > 0 }

// curveSpec declares a curve of a sweep.
type curveSpec struct {
	id, title, unit string
	higherBetter    bool
}

// sweepRec collects one sweep's values while it runs. It is used by one
// goroutine.
type sweepRec struct {
	sw     Sweep
	curves []curveSpec
	sys    []string
	vals   map[string]map[string]map[float64]*Value // curve → system → x
	notes  map[string]string
	log    io.Writer
}

func newSweepRec(id, title, x, xUnit string, points []float64, sys []string, log io.Writer, curves ...curveSpec) *sweepRec {
	r := &sweepRec{sw: Sweep{ID: id, Title: title, X: x, XUnit: xUnit, Points: points}, curves: curves, sys: sys,
		vals: map[string]map[string]map[float64]*Value{}, notes: map[string]string{}, log: log}
	for _, c := range curves {
		r.vals[c.id] = map[string]map[float64]*Value{}
		for _, s := range sys {
			r.vals[c.id][s] = map[float64]*Value{}
		}
	}
	return r
}

func (r *sweepRec) val(curve, sys string, x float64) *Value {
	bySys, ok := r.vals[curve]
	if !ok {
		panic("compare: sweep " + r.sw.ID + " has no curve " + curve) // a programming error of this package
	}
	v := bySys[sys][x]
	if v == nil {
		v = &Value{X: x}
		bySys[sys][x] = v
	}
	return v
}

// set records a sample of curve for sys at x.
func (r *sweepRec) set(curve, sys string, x, y float64) {
	v := r.val(curve, sys, x)
	if !math.IsNaN(y) && !math.IsInf(y, 0) {
		v.Samples = append(v.Samples, y)
	}
}

// fail records err for sys at x on every curve: not applicable when err
// matches errNotApplicable, failed otherwise.
func (r *sweepRec) fail(sys string, x float64, err error) {
	for _, c := range r.curves {
		r.failCurve(c.id, sys, x, err)
	}
	fmt.Fprintf(r.log, "  %-12s %-10s %-8g %v\n", r.sw.ID, sys, x, err)
}

func (r *sweepRec) failCurve(curve, sys string, x float64, err error) {
	v := r.val(curve, sys, x)
	if errors.Is(err, errNotApplicable) {
		v.NA = err.Error()
	} else if v.Err == "" {
		v.Err = err.Error()
	}
}

// failed reports whether sys has a failure or NA at x (on the first curve).
func (r *sweepRec) failed(sys string, x float64) bool {
	v := r.val(r.curves[0].id, sys, x)
	return v.NA != "" || v.Err != ""
}

// done returns the sweep with every value summarized; a point nothing was
// recorded for is an error value, never a gap.
func (r *sweepRec) done() Sweep {
	sw := r.sw
	for _, c := range r.curves {
		cv := Curve{ID: c.id, Title: c.title, Unit: c.unit, HigherBetter: c.higherBetter}
		for _, s := range r.sys {
			se := Series{System: s, Note: r.notes[s]}
			for _, x := range sw.Points {
				v := r.val(c.id, s, x)
				switch {
				case v.NA != "" || v.Err != "":
					v.Samples = nil
				case len(v.Samples) == 0:
					v.Err = "no measurement"
				default:
					v.Y = median(v.Samples)
				}
				se.Values = append(se.Values, *v)
			}
			cv.Series = append(cv.Series, se)
		}
		sw.Curves = append(sw.Curves, cv)
	}
	return sw
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func floats(xs []int) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	return out
}

// RunSweeps runs the sweeps and returns their record.
func RunSweeps(ctx context.Context, o SweepOptions) (*SweepReport, error) {
	p := o.sweepPlan()
	log := o.Log
	if log == nil {
		log = io.Discard
	}
	var systems []system
	for _, name := range sweepSystems {
		if len(o.Systems) > 0 && !slices.Contains(o.Systems, name) {
			continue
		}
		one := Options{Bin: o.Bin, Dir: o.Dir, Systems: []string{name}}
		systems = append(systems, one.systems()...)
	}
	if len(systems) == 0 {
		return nil, errors.New("compare: no system with sweeps selected")
	}
	sw := &sweeper{o: o, p: p, log: log, systems: systems}
	for _, s := range systems {
		sw.names = append(sw.names, s.name())
	}
	started, load := time.Now(), loadavg()
	rep := &SweepReport{Mode: "full", Started: started, Notes: sweepNotes}
	switch {
	case o.plan != nil:
		rep.Mode = "test"
	case o.Quick:
		rep.Mode = "quick"
	}
	runs := map[string]func(context.Context) (Sweep, error){
		"calls": sw.calls, "concurrency": sw.concurrency, "frame-size": sw.frameSize, "pool": sw.pool,
		"long-call": sw.longCall, "journal": sw.journal,
	}
	for _, id := range SweepIDs {
		if len(o.Sweeps) > 0 && !slices.Contains(o.Sweeps, id) {
			continue
		}
		fmt.Fprintf(log, "compare: sweep %s…\n", id)
		s, err := runs[id](ctx)
		if err != nil {
			return nil, fmt.Errorf("sweep %s: %w", id, err)
		}
		rep.Sweeps = append(rep.Sweeps, s)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rep.Duration = time.Since(started)
	rep.Targets = sweepTargets(rep)
	rep.Machine = machine(load)
	if o.Revision != "" {
		rep.Machine.Modules["github.com/skulkrt/skulk"] += " @ " + o.Revision
	}
	return rep, nil
}

// sweeper runs the sweeps. It is used by one goroutine.
type sweeper struct {
	o       SweepOptions
	p       sweepPlan
	log     io.Writer
	systems []system
	names   []string
}

// sweepNotes explain how each sweep drove each system; they go with every
// record.
var sweepNotes = []string{
	"calls: the compare run's calls and unary workloads (Run with -workloads calls,unary), every system interleaved round by round after a calibration run that warms it up; each round times sequential small calls one after another and records their p50 and p99. skulk: echo of one 64-byte chunk sent with the invoke, and the reply tool for unary; go-plugin: a unary gRPC call; mcp: tools/call echo; raw: a 64-byte ping-pong (its unary row repeats it). One point, the 64-byte payload: the record's table of the call targets.",
	"CPU: user+system time of the host (this process, getrusage RUSAGE_SELF) and of the live children (/proc/PID/stat utime+stime, read before they are stopped), over the measured window; per frame, per MiB or per call of that window.",
	"Host memory: in the concurrency sweep, the live heap and goroutine stacks after a GC (the heap the GC marked live, /gc/heap/live:bytes, plus runtime.MemStats StackInuse) with every stream open, less the same reading with the session idle; in the long call, HeapInuse+StackInuse at each checkpoint, without a GC. The host process is shared by every system, so its RSS says little per system. Child memory: VmRSS of the children.",
	"concurrency: N streams of 64-byte frames child→host at once, each read by its own goroutine (skulk: count calls, one stream connection each; go-plugin: N gRPC server streams on go-plugin's one connection; mcp: N concurrent tools/call each sending progress notifications), measured over a window once every stream has delivered a frame; meanwhile one goroutine makes sequential small calls (the compare run's call workload) and their p50/p99 are the probe latency. A fresh child per point.",
	"frame-size: one stream of chunks of the size child→host (skulk: media, inline attachments recycled; go-plugin: server stream of messages of the size, message limits 16 MiB; mcp: one tools/call per chunk returning an embedded-resource blob, base64 in JSON; raw: writes of the size read into one reused buffer of the size). Each measurement's chunk count is calibrated from a run of at least an eighth of its window, so that one call's own cost does not shrink the window of fast small chunks.",
	"pool: skulk: one host with PoolSize children; go-plugin and mcp have no pool, so a pool is that many clients each with its own child, started at once. Calls: sequential small calls from 16 goroutines spread over the children (skulk: the host picks the least busy child; others: round robin). Idle CPU: the children's own on-CPU time over a window with no calls, summed from /proc/PID/task/*/schedstat in nanoseconds (skulk's health pings, 1 s interval); the host process, shared by every system's session, is left out.",
	"long-call: one stream of 64-byte frames sampled at even checkpoints; the rate, host heap and child RSS at each. MCP runs fewer frames (see its series note): at its rate the full count would take most of the run's budget.",
	"journal: skulk only (the peers have no call log). One count call whose chunks are output events, with a best-effort SQLite journal (calllog/sqlitestore, shape content): once with the default queue (65,536 events; overflow drops) for the keep rate, once with a queue holding the whole call for the journal's sustained rate, replay (EventsAfter pages + the replay of skulk-host replay) and follower catch-up (calllog.Follow from the start) over that store, and bytes on disk (database, WAL and shared-memory files) per kept event.",
}
