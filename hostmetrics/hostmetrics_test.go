package hostmetrics_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/hostmetrics"
	"github.com/skulkrt/skulk/skulktest"
)

func tools(started chan<- struct{}) child.Options {
	return child.Options{Tools: []child.Tool{{
		ID:      "ok",
		Handler: func(context.Context, *child.Stream) (frame.Payload, error) { return nil, nil },
	}, {
		ID: "bad",
		Handler: func(context.Context, *child.Stream) (frame.Payload, error) {
			return nil, &frame.Error{Code: frame.CodeProviderError, Message: "no"}
		},
	}, {
		ID: "hang",
		Handler: func(ctx context.Context, _ *child.Stream) (frame.Payload, error) {
			started <- struct{}{}
			<-ctx.Done()
			return nil, context.Cause(ctx)
		},
	}}}
}

func call(t *testing.T, h *host.Host, tool string) error {
	t.Helper()
	c, err := h.Call(context.Background(), tool, nil, host.WithInput())
	if err != nil {
		return err
	}
	_, err = c.Wait()
	return err
}

// gathered returns the families reg gathers, by name.
func gathered(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]*dto.MetricFamily, len(fams))
	for _, f := range fams {
		m[f.GetName()] = f
	}
	return m
}

func TestCountersMoveByTheCallsMade(t *testing.T) {
	m := hostmetrics.New()
	started := make(chan struct{}, 1)
	h := skulktest.StartProvider(t, tools(started), host.Config{CallLog: calllog.Options{Observers: []calllog.Observer{m}}})
	m.Watch(h)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)

	for range 3 {
		if err := call(t, h, "ok"); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if err := call(t, h, "bad"); err == nil {
			t.Fatal("bad completed")
		}
	}
	// Tools no child declared: one series, whatever ids callers name.
	for _, tool := range []string{"nope", "nope2", "_unknown2"} {
		var refused *host.RefusedError
		if err := call(t, h, tool); !errors.As(err, &refused) {
			t.Fatalf("unknown tool %q: %v", tool, err)
		}
	}
	// A kill -9 of the child in the middle of a call: a synthetic failure
	// and a restart.
	c, err := h.Call(context.Background(), "hang", nil, host.WithInput())
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(skulktest.Timeout):
		t.Fatal("handler did not start")
	}
	if err := syscall.Kill(h.Children()[0].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(); err == nil {
		t.Fatal("a killed child's call completed")
	}
	skulktest.WaitRestart(t, h, 0, 1)
	if err := h.FlushObservers(context.Background()); err != nil {
		t.Fatal(err)
	}

	want := `
# HELP skulk_calls_total Calls ended, by tool, outcome (completed, failed, cancelled, refused), code (ok or the error code) and synthetic (the host made the outcome up).
# TYPE skulk_calls_total counter
skulk_calls_total{code="ok",outcome="completed",synthetic="false",tool="ok"} 3
skulk_calls_total{code="provider_error",outcome="failed",synthetic="false",tool="bad"} 2
skulk_calls_total{code="invalid_frame",outcome="refused",synthetic="false",tool="_unknown"} 3
skulk_calls_total{code="unreachable",outcome="failed",synthetic="true",tool="hang"} 1
# HELP skulk_child_restarts_total Restarts of a pool slot's child since the host started (recycles included).
# TYPE skulk_child_restarts_total counter
skulk_child_restarts_total{slot="0"} 1
# HELP skulk_calls_in_flight Calls holding a stream slot of a child now.
# TYPE skulk_calls_in_flight gauge
skulk_calls_in_flight 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "skulk_calls_total", "skulk_child_restarts_total", "skulk_calls_in_flight"); err != nil {
		t.Error(err)
	}
	fams := gathered(t, reg)
	var timed uint64
	for _, mm := range fams["skulk_call_duration_seconds"].GetMetric() {
		timed += mm.GetHistogram().GetSampleCount()
	}
	if timed != 9 {
		t.Errorf("skulk_call_duration_seconds counts %d calls, want 9", timed)
	}
	for _, mm := range fams["skulk_call_duration_seconds"].GetMetric() {
		for _, l := range mm.GetLabel() {
			if l.GetName() == "tool" && strings.HasPrefix(l.GetValue(), "nope") {
				t.Errorf("skulk_call_duration_seconds has a series for tool %q, which no child declared", l.GetValue())
			}
		}
	}
	for _, mm := range fams["skulk_child_state"].GetMetric() {
		var state string
		for _, l := range mm.GetLabel() {
			if l.GetName() == "state" {
				state = l.GetValue()
			}
		}
		if want := state == host.StateReady.String(); (mm.GetGauge().GetValue() == 1) != want {
			t.Errorf("skulk_child_state{state=%q} = %v", state, mm.GetGauge().GetValue())
		}
	}
	if n := testutil.CollectAndCount(m, "skulk_child_state"); n != 5 {
		t.Errorf("skulk_child_state has %d series for one slot, want one per state (5)", n)
	}
}

// In flight counts the calls holding a stream slot at the scrape.
func TestInFlight(t *testing.T) {
	m := hostmetrics.New()
	started := make(chan struct{}, 1)
	h := skulktest.StartProvider(t, tools(started), host.Config{CallLog: calllog.Options{Observers: []calllog.Observer{m}}})
	m.Watch(h)
	ctx, cancel := context.WithCancel(context.Background())
	c, err := h.Call(ctx, "hang", nil, host.WithInput())
	if err != nil {
		t.Fatal(err)
	}
	<-started
	const want = `
# HELP skulk_calls_in_flight Calls holding a stream slot of a child now.
# TYPE skulk_calls_in_flight gauge
skulk_calls_in_flight 1
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "skulk_calls_in_flight"); err != nil {
		t.Error(err)
	}
	cancel()
	c.Wait()
}

// A call of a tool the host does not offer is counted under
// hostmetrics.UnknownTool however it ended: here a required journal
// refuses its start before the host looked the tool up, and a call ended
// before Watch has no host to look it up in.
func TestUnknownToolsShareOneSeries(t *testing.T) {
	m := hostmetrics.New()
	h := skulktest.StartProvider(t, tools(nil), host.Config{})
	at := time.Now()
	end := func(call, tool, refused string) {
		t.Helper()
		for _, e := range []calllog.Event{
			{Kind: calllog.KindStarted, Call: call, Tool: tool, At: at},
			{Kind: calllog.KindFailed, Call: call, Tool: tool, At: at, Refused: refused,
				Error: &frame.Error{Code: frame.CodeInvalidFrame}},
		} {
			if err := m.Observe(context.Background(), e); err != nil {
				t.Fatal(err)
			}
		}
	}
	end("c1", "ok", "journal_start") // before Watch: no catalogue to look in
	m.Watch(h)
	end("c2", "ok", "journal_start")
	end("c3", "random-1", "journal_start")
	end("c4", "random-2", "journal_policy")
	end("c5", "random-3", "unknown_tool")

	const want = `
# HELP skulk_calls_total Calls ended, by tool, outcome (completed, failed, cancelled, refused), code (ok or the error code) and synthetic (the host made the outcome up).
# TYPE skulk_calls_total counter
skulk_calls_total{code="invalid_frame",outcome="refused",synthetic="false",tool="_unknown"} 4
skulk_calls_total{code="invalid_frame",outcome="refused",synthetic="false",tool="ok"} 1
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "skulk_calls_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m, "skulk_call_duration_seconds"); n != 2 {
		t.Errorf("skulk_call_duration_seconds has %d series, want 2 (ok and _unknown)", n)
	}
}
