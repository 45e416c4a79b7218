package compare

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/skulkrt/skulk/bench/internal/cpuacct"
)

// bins are the children, built once by TestMain for the system tests.
var bins Binaries

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "compare-test-*")
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		var mod string
		if mod, err = ModuleDir(ctx); err == nil {
			bins, err = Build(ctx, mod, filepath.Join(dir, "bin"), nil)
		}
		if child := os.Getenv(childBinVar); child != "" && err == nil {
			bins.Skulk = child // a host A/B: every build drives the same child
		}
		cancel()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i))
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50}, {0.99, 99}, {1, 100}, {0, 1}} {
		if got := percentile(ds, c.q); got != c.want {
			assert.Fail(t, fmt.Sprintf("percentile(1..100, %v) = %v, want %v", c.q, got, c.want))
		}
	}
	assert.EqualValues(t, 100, ds[0], "percentile reordered its input")
	assert.EqualValues(t, 0, percentile(nil, 0.5), "percentile of nothing is not 0")
}

func TestSummarize(t *testing.T) {
	f := &Figure{Samples: []float64{4, 1, 3, 2}}
	summarize(f)
	assert.Falsef(t, f.Median != 2.5 || f.Min != 1 || f.Max != 4 || f.SpreadPct != 120, "summarize(4 1 3 2) = median %v min %v max %v spread %v", f.Median, f.Min, f.Max, f.SpreadPct)
	f = &Figure{Samples: []float64{5, 1, 3}}
	summarize(f)
	assert.EqualValuesf(t, 3, f.Median, "median of 5 1 3 = %v, want 3", f.Median)
}

// fakeRunner makes a report from fixed figures.
func fakeReport(figs map[string]map[string]float64) *Report {
	r := &runner{res: make(map[string]map[string]*Figure), cpuOf: make(map[string]string), log: io.Discard}
	for _, name := range SystemNames {
		r.systems = append(r.systems, &skulkSystem{sys: name})
	}
	for _, m := range []metricSpec{mSmall, mMedia, mCall50, mUnary50, mNestHost50, mNestChild50, mNestHostOwn50, mNestChildOwn50, mStart, mCrash, mHealth} {
		for sys, v := range figs[m.id] {
			r.fig(m, sys).Samples = []float64{v}
		}
	}
	// CPU per frame of the small stream: the host's share in the first
	// value, the children's in the second, over a million frames.
	for sys, v := range cpus {
		u := cpuacct.Usage{Host: time.Duration(v[0] * 1e6), Children: time.Duration(v[1] * 1e6)}
		r.recordCPU(cSmall, sys, u, 1_000_000, nil)
	}
	r.recordCPU(cSmall, "raw", cpuacct.Usage{}, 0, notApplicable("a test's reason"))
	return r.report(time.Second)
}

// cpus are fakeReport's CPU per frame, host and children, in ns.
var cpus = map[string][2]float64{Skulk: {300, 500}, "go-plugin": {1200, 800}}

// TestCPURows: the CPU row of a workload sits under it, says whose work it
// costs, splits host and children in the JSON and compares the systems
// as a time (lower is better).
func TestCPURows(t *testing.T) {
	rep := fakeReport(map[string]map[string]float64{"small-stream": {Skulk: 300, "go-plugin": 100, "raw": 400}})
	require.Falsef(t, len(rep.Metrics) < 2 || rep.Metrics[0].ID != "small-stream" || rep.Metrics[1].ID != "small-stream-cpu", "rows %v, want the CPU row right after its workload's", rep.Metrics)
	row := rep.Metrics[1]
	assert.Falsef(t, row.CPUOf != "small-stream" || row.Unit != "ns/frame" || row.HigherBetter, "CPU row: of %q, unit %q, higher better %v", row.CPUOf, row.Unit, row.HigherBetter)
	sk, gp := findFig(row, Skulk), findFig(row, "go-plugin")
	assert.Falsef(t, sk.Median != 800 || sk.HostCPU != 300 || sk.ChildCPU != 500, "skulk CPU per frame: %v (host %v, children %v), want 800 (300, 500)", sk.Median, sk.HostCPU, sk.ChildCPU)
	assert.EqualValuesf(t, 2.5, gp.SkulkAdvantage, "CPU advantage over go-plugin = %v, want 2.5 (2,000 ns against 800)", gp.SkulkAdvantage)
	if f := findFig(row, "raw"); f.NA == "" || len(f.Samples) != 0 {
		assert.Fail(t, fmt.Sprintf("raw: %+v, want n/a", f))
	}
	b, err := json.Marshal(rep)
	require.NoError(t, err)
	for _, s := range []string{`"cpu_of":"small-stream"`, `"host_cpu":300`, `"child_cpu":500`, `"host_cpu_samples":[300]`} {
		assert.Falsef(t, !strings.Contains(string(b), s), "JSON lacks %s", s)
	}
	var tb strings.Builder
	require.NoError(t, WriteTable(&tb, rep))
	lines := strings.Split(tb.String(), "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "small-frame stream") })
	if i < 0 || i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "  CPU per frame, host + children") ||
		!strings.Contains(lines[i+1], "ns/frame") || !strings.Contains(lines[i+1], "800") || !strings.Contains(lines[i+1], "2.50×") {
		assert.Fail(t, fmt.Sprintf("the table has no CPU row under the small stream's:\n%s", tb.String()))
	}
}

func TestAdvantageAndTargets(t *testing.T) {
	rep := fakeReport(map[string]map[string]float64{
		"small-stream":         {Skulk: 300, SkulkDemo: 270, "go-plugin": 100, "raw": 400},
		"call-p50":             {Skulk: 20, "go-plugin": 100, "raw": 10},
		"unary-p50":            {Skulk: 30, "go-plugin": 100, "raw": 10},
		"nested-host-p50":      {Skulk: 80, "go-plugin": 100},
		"nested-child-p50":     {Skulk: 130, "go-plugin": 200},
		"nested-host-own-p50":  {Skulk: 50, "go-plugin": 60},
		"nested-child-own-p50": {Skulk: 100, "go-plugin": 150},
		"crash":                {Skulk: 25, "go-plugin": 20},
		"start":                {Skulk: 2, "raw": 2.5},
		"health-p99":           {Skulk: 1},
	})
	if f := figOf(rep, "small-stream", "go-plugin"); f.SkulkAdvantage != 3 {
		assert.Fail(t, fmt.Sprintf("rate advantage = %v, want 3", f.SkulkAdvantage))
	}
	if f := figOf(rep, "call-p50", "go-plugin"); f.SkulkAdvantage != 5 {
		assert.Fail(t, fmt.Sprintf("latency advantage = %v, want 5", f.SkulkAdvantage))
	}
	status := map[string]Target{}
	for _, tg := range rep.Targets {
		status[tg.Text] = tg
	}
	for text, met := range map[string]bool{
		"small-frame stream ≥ 2× go-plugin's gRPC stream rate":           true,
		"small-frame stream ≥ the raw one-write-per-message rate":        false,
		"sequential call p50 within 2× the raw ping-pong round trip":     true,
		"sequential call p50 ≥ 3× faster than go-plugin's unary call":    true,
		"crash detection under 20 ms":                                    false,
		"health-ping p99 under 5 ms while every stream is backpressured": true,
		// Issue 39's rows of the compare run.
		"small-frame stream ≥ 3× go-plugin's gRPC stream rate":                                                     true,
		"small-frame stream CPU ≤ 300 ns per frame, host + child":                                                  false, // 800 ns (cpus)
		"small-frame stream with output schemas (skulk-demo) ≥ 0.8× the schema-less rate":                          true,  // 0.9×
		"crash detection at most go-plugin's":                                                                      false, // 25 against 20 ms
		"start to first call at most raw's (exec, one connection, one ping-pong)":                                  true,
		"nested call to a host-side function p50 (as its caller times it) within 2× the host's own unary call p50": true,  // 50 against 30
		"nested call to another child's tool p50 (as its caller times it) within 3× the host's own unary call p50": false, // 100 against 30
		"call holding a nested call to a host-side function p50 within 3× the host's own unary call p50":           true,  // 80
		"call holding a nested call to another child's tool p50 within 4× the host's own unary call p50":           false, // 130
	} {
		tg, ok := status[text]
		if !ok {
			assert.Fail(t, fmt.Sprintf("target %q missing", text))
			continue
		}
		assert.Falsef(t, tg.Met != met, "target %q: met = %v, want %v (%s)", text, tg.Met, met, tg.Status)
	}
	if s := status["small-frame stream ≥ the raw one-write-per-message rate"].Status; !strings.Contains(s, "25% short") {
		assert.Fail(t, fmt.Sprintf("missed target status %q does not say by how much", s))
	}
	var b strings.Builder
	require.NoError(t, WriteTable(&b, rep))
	if !strings.Contains(b.String(), "3.00×") || !strings.Contains(b.String(), "MISSED") {
		assert.Fail(t, fmt.Sprintf("table lacks the advantage or the missed target:\n%s", b.String()))
	}
}

func TestNum(t *testing.T) {
	for v, want := range map[float64]string{12_345_678: "12.3M", 1_234_567: "1.23M", 45_678: "46k", 456: "456", 45.6: "45.6", 4.567: "4.57"} {
		if got := num(v); got != want {
			assert.Fail(t, fmt.Sprintf("num(%v) = %q, want %q", v, got, want))
		}
	}
}

// exercise runs every workload of s once with small counts.
func exercise(t *testing.T, s system) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sess, err := s.open(ctx)
	require.NoError(t, err)
	defer func() {
		assert.NoError(t, sess.close(), "close")
	}()
	assert.NoError(t, sess.smallStream(ctx, 1000), "smallStream")
	assert.NoError(t, sess.media(ctx, 3, mediaChunk), "media")
	assert.NoError(t, sess.echo(ctx, 500), "echo")
	for range 10 {
		require.NoError(t, sess.call(ctx), "call")
	}
	for range 10 {
		if err := sess.unary(ctx); err != nil {
			if errors.Is(err, errNotApplicable) && s.name() == SkulkDemo {
				break // the demo child has no unary tool
			}
			require.FailNow(t, fmt.Sprintf("unary: %v", err))
		}
	}
	if d, err := s.coldStart(ctx); err != nil || d <= 0 {
		assert.Fail(t, fmt.Sprintf("coldStart = %v, %v", d, err))
	}
	if d, err := s.crash(ctx); err != nil || d <= 0 {
		assert.Fail(t, fmt.Sprintf("crash = %v, %v", d, err))
	}
	ds, err := s.healthUnderBackpressure(ctx, 2, 5)
	switch {
	case errors.Is(err, errNotApplicable):
	case err != nil:
		assert.Fail(t, fmt.Sprintf("health: %v", err))
	case len(ds) != 5:
		assert.Fail(t, fmt.Sprintf("health gave %d pings, want 5", len(ds)))
	}
}

func TestRaw(t *testing.T) { exercise(t, &rawSystem{bin: bins.Raw, dir: t.TempDir()}) }

func TestGoPlugin(t *testing.T) { exercise(t, &grpcSystem{bin: bins.GoPlugin, dir: t.TempDir()}) }

// TestGoPluginCrashLeavesNothing: go-plugin's server makes a directory for
// its socket in TMPDIR and removes it only when it exits on its own; the
// crash workload's children, killed with SIGKILL, make theirs in the
// run's directory, so nothing is left in the system's temporary directory.
func TestGoPluginCrashLeavesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pattern := filepath.Join(os.TempDir(), "plugin*")
	before, err := filepath.Glob(pattern)
	require.NoError(t, err)
	dir := t.TempDir()
	s := &grpcSystem{bin: bins.GoPlugin, dir: dir}
	for range 3 {
		_, err := s.crash(ctx)
		require.NoError(t, err)
	}
	after, err := filepath.Glob(pattern)
	require.NoError(t, err)
	if len(after) > len(before) {
		assert.Fail(t, fmt.Sprintf("%d directories left in %s by killed go-plugin children", len(after)-len(before), os.TempDir()))
	}
	left, err := filepath.Glob(filepath.Join(dir, "plugin*"))
	require.NoError(t, err)
	assert.NotEqualValues(t, 0, len(left), "the killed children made no directory in the run's TMPDIR: the test no longer shows what it is for")
}

func TestMCP(t *testing.T) { exercise(t, &mcpSystem{bin: bins.MCP}) }

func TestSkulk(t *testing.T) {
	exercise(t, &skulkSystem{sys: Skulk, bin: bins.Skulk, dir: t.TempDir()})
}

func TestSkulkDemo(t *testing.T) {
	exercise(t, &skulkSystem{sys: SkulkDemo, bin: bins.SkulkDemo, dir: t.TempDir()})
}

// TestRunQuickSubset runs the driver end to end on a subset and checks the
// report has a Figure for every system.
func TestRunQuickSubset(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{Quick: true, Bin: bins, Dir: t.TempDir(),
		Systems: []string{Skulk, "raw"}, Workloads: []string{"calls", "unary", "crash"}})
	require.NoError(t, err)
	require.EqualValuesf(t, 7, len(rep.Metrics), "got %d metrics, want 7 (call p50, p99, CPU, unary p50, p99, CPU, crash)", len(rep.Metrics))
	for _, m := range rep.Metrics {
		for _, f := range m.Figures {
			assert.Falsef(t, f.Err != "" || len(f.Samples) == 0 || f.Median <= 0, "%s/%s: no Figure (%s)", m.ID, f.System, f.Err)
			if m.CPUOf == "" {
				continue
			}
			// The host's CPU is read to the microsecond; the child's to
			// the 10 ms tick, so one round of cheap calls may read none.
			var child float64
			for _, c := range f.ChildCPUSamples {
				child += c
			}
			assert.Falsef(t, f.HostCPU <= 0 || len(f.HostCPUSamples) != len(f.Samples) || (f.System == Skulk && child <= 0), "%s/%s: host CPU %v, children's %v over the rounds", m.ID, f.System, f.HostCPUSamples, f.ChildCPUSamples)
		}
	}
}

// TestNestedRows runs the nested workload: Skulk and go-plugin each have
// a p50, p99 and CPU figure for a call holding a nested call to a
// host-side function and to another child's tool, and a p50 and p99 of
// the nested call alone, which lies inside the call that holds it; raw,
// which has no calls both ways, is marked not applicable rather than
// failed.
func TestNestedRows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := plan{rounds: 1, target: 20 * time.Millisecond, timeout: 30 * time.Second}
	rep, err := Run(ctx, Options{Bin: bins, Dir: t.TempDir(), sizes: &p,
		Systems: []string{Skulk, "go-plugin", "raw"}, Workloads: []string{"nested"}})
	require.NoError(t, err)
	var ids []string
	for _, m := range rep.Metrics {
		ids = append(ids, m.ID)
		for _, f := range m.Figures {
			switch {
			case f.System == "raw" && m.CPUOf != "":
				assert.Falsef(t, len(f.Samples) > 0 || f.Err != "", "%s/raw: %d samples, err %q; want none", m.ID, len(f.Samples), f.Err)
			case f.System == "raw":
				assert.NotEqualValuesf(t, "", f.NA, "%s/raw: not marked n/a (err %q)", m.ID, f.Err)
			case f.Err != "" || f.NA != "" || len(f.Samples) == 0 || f.Median <= 0:
				assert.Fail(t, fmt.Sprintf("%s/%s: no figure (err %q, n/a %q)", m.ID, f.System, f.Err, f.NA))
			}
		}
	}
	want := []string{"nested-host-p50", "nested-host-p99", "nested-host-own-p50", "nested-host-own-p99", "nested-host-cpu",
		"nested-child-p50", "nested-child-p99", "nested-child-own-p50", "nested-child-own-p99", "nested-child-cpu"}
	assert.Falsef(t, !reflect.DeepEqual(ids, want), "rows %q, want %q", ids, want)
	// Each nested call lies inside the call that holds it, which adds at
	// least a round trip host → child → host, so every percentile of the
	// one is below the other's.
	byID := make(map[string]Metric)
	for _, m := range rep.Metrics {
		byID[m.ID] = m
	}
	for _, pair := range [][2]string{{"nested-host-own-p50", "nested-host-p50"}, {"nested-host-own-p99", "nested-host-p99"},
		{"nested-child-own-p50", "nested-child-p50"}, {"nested-child-own-p99", "nested-child-p99"}} {
		for _, sys := range []string{Skulk, "go-plugin"} {
			own, outer := findFig(byID[pair[0]], sys), findFig(byID[pair[1]], sys)
			assert.Positivef(t, own.Median, "%s/%s", pair[0], sys)
			assert.Lessf(t, own.Median, outer.Median, "%s/%s not below %s", pair[0], sys, pair[1])
		}
	}
}
