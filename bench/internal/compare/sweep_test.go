package compare

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skulkrt/skulk/bench/internal/cpuacct"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tinyPlan sizes a sweep run for the tests: every sweep, few points,
// short windows.
var tinyPlan = sweepPlan{
	concRounds: 1, rounds: 1, window: 50 * time.Millisecond, target: 20 * time.Millisecond, idle: 50 * time.Millisecond,
	concurrency: []int{1, 8}, sizes: []int{64, 64 << 10}, pools: []int{1, 2}, poolCallers: 4,
	longFrames: 4000, longMCPFrames: 400, longSamples: 4, journalEvents: 1000, timeout: 60 * time.Second,
	calls: plan{rounds: 1, target: 20 * time.Millisecond, timeout: 60 * time.Second},
}

// TestSweepsEveryPoint runs every sweep against every system with tiny
// sizes and checks each claims a value for every point of every curve:
// measured, or not applicable with a reason; never failed, never missing.
func TestSweepsEveryPoint(t *testing.T) {
	if testing.Short() {
		t.Skip("starts children of every system")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	plan := tinyPlan
	rep, err := RunSweeps(ctx, SweepOptions{Bin: bins, Dir: t.TempDir(), plan: &plan})
	require.NoError(t, err)
	checkPoints(t, rep)
	// What a peer cannot do is said, with a reason.
	for _, c := range []struct{ sweep, curve, system string }{
		{"concurrency", "frames", "raw"}, {"journal", "keep-rate", "go-plugin"}, {"pool", "calls", "raw"},
	} {
		v := valueOf(t, rep, c.sweep, c.curve, c.system, 0)
		assert.Falsef(t, !strings.HasPrefix(v.NA, "n/a: ") || len(v.NA) < 12, "%s/%s/%s: NA = %q, want a reason", c.sweep, c.curve, c.system, v.NA)
	}
	if v := valueOf(t, rep, "journal", "keep-rate", Skulk, 0); v.Y <= 0 {
		assert.Fail(t, fmt.Sprintf("journal keep rate = %v", v.Y))
	}
	// The call targets are ratios of the run's own calls sweep.
	for _, text := range []string{
		"sequential small call p50 within 1.5× the raw ping-pong round trip",
		"sequential unary call p50 within 1.5× the raw ping-pong round trip",
	} {
		i := slices.IndexFunc(rep.Targets, func(tg Target) bool { return tg.Text == text })
		if i < 0 {
			assert.Fail(t, fmt.Sprintf("target %q not checked", text))
		} else if tg := rep.Targets[i]; tg.Got <= 0 || strings.HasPrefix(tg.Status, "not measured") {
			assert.Fail(t, fmt.Sprintf("target %q: got %v, %s", text, tg.Got, tg.Status))
		}
	}
}

func valueOf(t *testing.T, rep *SweepReport, sweep, curve, system string, i int) Value {
	t.Helper()
	for _, sw := range rep.Sweeps {
		for _, cv := range sw.Curves {
			if sw.ID == sweep && cv.ID == curve {
				for _, se := range cv.Series {
					if se.System == system {
						return se.Values[i]
					}
				}
			}
		}
	}
	require.FailNow(t, fmt.Sprintf("no %s/%s/%s", sweep, curve, system))
	return Value{}
}

// checkPoints fails t for every sweep of SweepIDs rep lacks, and for every
// point of every series of every curve that is not measured or not
// applicable with a reason (failed, or missing), naming the sweep, curve,
// system and point. Skulk is never not applicable.
func checkPoints(t *testing.T, rep *SweepReport) {
	t.Helper()
	var ids []string
	for _, sw := range rep.Sweeps {
		ids = append(ids, sw.ID)
		assert.Falsef(t, len(sw.Points) == 0 || len(sw.Curves) == 0, "%s: %d points, %d curves", sw.ID, len(sw.Points), len(sw.Curves))
		for _, cv := range sw.Curves {
			var systems []string
			for _, se := range cv.Series {
				systems = append(systems, se.System)
				if len(se.Values) != len(sw.Points) {
					assert.Fail(t, fmt.Sprintf("%s/%s/%s: %d values for %d points", sw.ID, cv.ID, se.System, len(se.Values), len(sw.Points)))
					continue
				}
				for i, v := range se.Values {
					switch {
					case v.X != sw.Points[i]:
						assert.Fail(t, fmt.Sprintf("%s/%s/%s: value %d is at %v, want %v", sw.ID, cv.ID, se.System, i, v.X, sw.Points[i]))
					case v.Err != "":
						assert.Fail(t, fmt.Sprintf("%s/%s/%s at %v: failed: %s", sw.ID, cv.ID, se.System, v.X, short(v.Err)))
					case v.NA == "" && !v.Measured():
						assert.Fail(t, fmt.Sprintf("%s/%s/%s at %v: neither measured nor n/a", sw.ID, cv.ID, se.System, v.X))
					case v.NA != "" && se.System == Skulk:
						assert.Fail(t, fmt.Sprintf("%s/%s/skulk at %v: n/a (%s)", sw.ID, cv.ID, v.X, v.NA))
					case v.NA != "" && len(strings.TrimSpace(strings.TrimPrefix(v.NA, "n/a:"))) == 0:
						assert.Fail(t, fmt.Sprintf("%s/%s/%s at %v: n/a with no reason", sw.ID, cv.ID, se.System, v.X))
					}
				}
			}
			assert.Falsef(t, !slices.Equal(systems, sweepSystems), "%s/%s: series %v, want %v", sw.ID, cv.ID, systems, sweepSystems)
		}
	}
	for _, id := range SweepIDs {
		assert.Falsef(t, !slices.Contains(ids, id), "no sweep %s (sweeps %v)", id, ids)
	}
	assert.Falsef(t, !slices.Equal(ids, SweepIDs) && len(ids) == len(SweepIDs), "sweeps %v, want %v", ids, SweepIDs)
}

// short cuts an error of a record (which may join thousands of streams'
// errors) to a line.
func short(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// recordFile is the committed record of a full sweeps run, the one the
// charts in docs/perf are drawn from.
const recordFile = "../../../docs/perf/sweeps.json"

// TestRecordEveryPoint checks the committed record as TestSweepsEveryPoint
// checks a fresh run: every sweep this package runs is in it, and every
// point of every curve is measured or not applicable with a reason, never
// failed, so that no chart drawn from it has a silent gap.
func TestRecordEveryPoint(t *testing.T) {
	b, err := os.ReadFile(recordFile)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("no record at %s: cd bench && go run ./cmd/compare -sweeps -o ../docs/perf/sweeps.json", recordFile)
	}
	require.NoError(t, err)
	var rep SweepReport
	require.NoErrorf(t, json.Unmarshal(b, &rep), "%s", recordFile)
	assert.EqualValuesf(t, "full", rep.Mode, "%s: a %q run, want the full run", recordFile, rep.Mode)
	checkPoints(t, &rep)
}

// TestAccountingCountsBoth measures a real stream of each system with a
// child the sweeps meter, with the sweeps' accounting, and checks the CPU
// shows up in both processes: the host reading the frames and the child
// writing them.
func TestAccountingCountsBoth(t *testing.T) {
	for _, c := range []struct {
		s     system
		batch int // frames of one stream: several clock ticks of CPU in the child
	}{
		{&skulkSystem{sys: Skulk, bin: bins.Skulk, dir: t.TempDir()}, 200_000},
		{&grpcSystem{bin: bins.GoPlugin, dir: t.TempDir()}, 200_000},
		{&mcpSystem{bin: bins.MCP}, 20_000},
		{&rawSystem{bin: bins.Raw, dir: t.TempDir()}, 1_000_000},
	} {
		t.Run(c.s.name(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			sess, err := c.s.open(ctx)
			require.NoError(t, err)
			defer func() {
				assert.NoError(t, sess.close(), "close")
			}()
			pids := sess.(streamerOrRaw).pids()
			require.Falsef(t, len(pids) != 1 || pids[0] <= 0 || pids[0] == os.Getpid(), "pids = %v", pids)
			m, err := cpuacct.Start(pids...)
			require.NoError(t, err)
			// Until each process has used several clock ticks (10 ms) of CPU:
			// a frame costs each side well over 50 ns.
			for u := (cpuacct.Usage{}); u.Host < 100*time.Millisecond || u.Children < 100*time.Millisecond; {
				require.NoError(t, sess.smallStream(ctx, c.batch))
				u, err = m.Stop()
				require.NoError(t, err)
				require.Falsef(t, u.Wall > 40*time.Second, "after %v: host %v, child %v of CPU", u.Wall, u.Host, u.Children)
			}
		})
	}
}

// TestStreamErrs: a point whose thousands of streams fail alike records
// one line that says how many, and keeps the first error for errors.Is.
func TestStreamErrs(t *testing.T) {
	assert.NoError(t, streamErrs(make([]error, 3)), "no failure")
	errs := make([]error, 4096)
	for i := 5; i < 4096; i += 2 {
		errs[i] = fmt.Errorf("stream %d: %w", i, context.DeadlineExceeded)
	}
	err := streamErrs(errs)
	assert.Falsef(t, !errors.Is(err, context.DeadlineExceeded) || err.Error() != "2046 of 4096 streams failed, the first: stream 5: context deadline exceeded", "streamErrs = %v", err)
}

func TestSweepTargets(t *testing.T) {
	m := func(y float64) Value { return Value{Y: y, Samples: []float64{y}} }
	rep := &SweepReport{Sweeps: []Sweep{
		{ID: "calls", Points: []float64{payloadSize}, Curves: []Curve{
			{ID: "call-p50", Series: []Series{{System: Skulk, Values: []Value{m(60)}}, {System: "raw", Values: []Value{m(30)}}}},
			{ID: "unary-p50", Series: []Series{{System: Skulk, Values: []Value{m(40)}}, {System: "raw", Values: []Value{m(30)}}}},
		}},
		{ID: "frame-size", Points: []float64{1 << 20}, Curves: []Curve{
			{ID: "throughput", Series: []Series{{System: Skulk, Values: []Value{m(950)}}, {System: "raw", Values: []Value{m(1000)}}}},
			{ID: "cpu-per-mib", Series: []Series{{System: Skulk, Values: []Value{m(3)}}, {System: "raw", Values: []Value{m(2)}}}},
		}},
		{ID: "concurrency", Points: []float64{1, 64, 4096}, Curves: []Curve{
			{ID: "frames", Series: []Series{{System: Skulk, Values: []Value{m(300), m(1000), {Err: "child unhealthy"}}}, {System: "go-plugin", Values: []Value{m(100), m(100), m(100)}}}},
			// From 64 streams on, the worst point is 4,096's (40 against 20).
			{ID: "host-mem-per-stream", Series: []Series{{System: Skulk, Values: []Value{m(500), m(10), m(40)}}, {System: "go-plugin", Values: []Value{m(1), m(20), m(20)}}}},
			{ID: "probe-p50", Series: []Series{{System: Skulk, Values: []Value{m(40), m(50), m(20_000)}}, {System: "go-plugin", Values: []Value{m(90), m(100), m(28_000)}}}},
		}},
		// At 8 children no system's idle children used any CPU in the
		// window: 0 against 0 is level.
		{ID: "pool", Points: []float64{1, 4, 8}, Curves: []Curve{
			{ID: "idle-cpu", Series: []Series{{System: Skulk, Values: []Value{m(100), m(50), m(0)}}, {System: "go-plugin", Values: []Value{m(200), m(60), m(0)}}, {System: "mcp", Values: []Value{m(80), m(40), m(0)}}}},
		}},
	}}
	for i := range rep.Sweeps {
		for j := range rep.Sweeps[i].Curves {
			for k := range rep.Sweeps[i].Curves[j].Series {
				for l := range rep.Sweeps[i].Curves[j].Series[k].Values {
					rep.Sweeps[i].Curves[j].Series[k].Values[l].X = rep.Sweeps[i].Points[l]
				}
			}
		}
	}
	got := map[string]Target{}
	for _, tg := range sweepTargets(rep) {
		got[tg.Text] = tg
	}
	for text, want := range map[string]struct {
		met    bool
		status string
	}{
		"sequential small call p50 within 1.5× the raw ping-pong round trip":             {false, "MISSED: 2 against ≤ 1.5, 1.33× over"},
		"sequential unary call p50 within 1.5× the raw ping-pong round trip":             {true, "met: 1.33 (target ≤ 1.5)"},
		"1 MiB media ≥ 90% of raw socket bandwidth":                                      {true, "met: 0.95"},
		"1 MiB media CPU per MiB within 1.2× raw's":                                      {false, "MISSED: 1.5 against ≤ 1.2, 1.25× over"},
		"small-frame stream ≥ 3× go-plugin's gRPC stream (one stream of 64-byte frames)": {true, "met: 3"},
		"4,096 concurrent streams: aggregate frames/s ≥ 90% of the 64-stream figure":     {false, "not measured: child unhealthy"},
		// Issue 39's rows of the sweeps.
		"host memory per open stream at most go-plugin's, at every point from 64 streams": {false, "MISSED: worst 2 at 4096 against ≤ 1, 2× over"},
		"4,096 concurrent streams: a small call's p50 alongside at most go-plugin's":      {true, "met: 0.714"},
		"idle CPU per child at most go-plugin's, at every pool size":                      {true, "met: worst 1 at 8"},
		"idle CPU per child at most mcp's, at every pool size":                            {false, "MISSED: worst 1.25 at 1 against ≤ 1"},
	} {
		tg, ok := got[text]
		if !ok {
			assert.Fail(t, fmt.Sprintf("target %q missing", text))
			continue
		}
		assert.Falsef(t, tg.Met != want.met || !strings.HasPrefix(tg.Status, want.status), "%s: met %v, %q; want %v, %q…", text, tg.Met, tg.Status, want.met, want.status)
	}
	if _, ok := got["small attachments, 64 B chunks: throughput at least go-plugin's"]; ok {
		assert.Fail(t, "a target of a curve the record lacks was reported")
	}
}

// A measured zero is a value: 0 against 0 is level, anything against 0
// is infinitely over.
func TestQuotientOfZero(t *testing.T) {
	assert.Equal(t, 1.0, quotient(0, 0))
	assert.True(t, math.IsInf(quotient(3, 0), 1))
	assert.Equal(t, 0.5, quotient(1, 2))
}

// A negative reading (a peer's memory per stream read as less than its
// idle session's, in the host process every session shares) judges
// nothing: the memory targets say not measured, never met; a point
// missed before it is reported missed.
func TestSweepTargetsNegativeReading(t *testing.T) {
	m := func(x, y float64) Value { return Value{X: x, Y: y, Samples: []float64{y}} }
	rep := &SweepReport{Sweeps: []Sweep{
		{ID: "concurrency", Points: []float64{64, 4096}, Curves: []Curve{
			{ID: "host-mem-per-stream", Series: []Series{
				{System: Skulk, Values: []Value{m(64, 50), m(4096, 50)}},
				{System: "go-plugin", Values: []Value{m(64, 13), m(4096, -5)}},
			}},
		}},
	}}
	got := map[string]Target{}
	for _, tg := range sweepTargets(rep) {
		got[tg.Text] = tg
	}
	for text, want := range map[string]string{
		"4,096 concurrent streams: host memory per open stream ≤ half of go-plugin's per gRPC stream": "not measured: a negative reading",
		// Missed at 64 already (50 against 13): what 4,096 would say
		// changes nothing.
		"host memory per open stream at most go-plugin's, at every point from 64 streams": "MISSED: worst 3.85 at 64 against ≤ 1; then not measured at 4096: a negative reading",
	} {
		tg, ok := got[text]
		require.Truef(t, ok, "target %q missing", text)
		assert.Falsef(t, tg.Met || !strings.HasPrefix(tg.Status, want), "%s: met %v, %q; want not met, %q…", text, tg.Met, tg.Status, want)
	}
	// Met at 64 (10 against 13), then a negative reading: not measured,
	// never met.
	rep.Sweeps[0].Curves[0].Series[0].Values[0] = m(64, 10)
	for _, tg := range sweepTargets(rep) {
		if tg.Text == "host memory per open stream at most go-plugin's, at every point from 64 streams" {
			assert.False(t, tg.Met)
			assert.Equal(t, "not measured at 4096: "+negativeReading, tg.Status)
		}
	}
}

// A target whose ratio is over a measured zero (infinite) still goes
// into the record: its got is null, its status says +Inf, and the
// record reads back.
func TestTargetInfiniteRatioInJSON(t *testing.T) {
	rep := &SweepReport{Targets: []Target{
		{Text: "over zero", Got: quotient(3, 0), Want: 1, Status: fmt.Sprintf("MISSED: worst %.3g", quotient(3, 0))},
		{Text: "finite", Got: 0.5, Want: 1, Met: true, Status: "met"},
	}}
	b, err := json.Marshal(rep)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"status":"MISSED: worst +Inf","got":null`)
	assert.Contains(t, string(b), `"got":0.5`)
	var back SweepReport
	require.NoError(t, json.Unmarshal(b, &back))
	require.Len(t, back.Targets, 2)
	assert.Equal(t, "MISSED: worst +Inf", back.Targets[0].Status)
	assert.Equal(t, 0.5, back.Targets[1].Got)
	assert.True(t, back.Targets[1].Met)
}
