package hostmetrics_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	require.NoError(t, err)
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
		require.NoError(t, call(t, h, "ok"))
	}
	for range 2 {
		if err := call(t, h, "bad"); err == nil {
			require.FailNow(t, "bad completed")
		}
	}
	// Tools no child declared: one series, whatever ids callers name.
	for _, tool := range []string{"nope", "nope2", "_unknown2"} {
		var refused *host.RefusedError
		if err := call(t, h, tool); !errors.As(err, &refused) {
			require.FailNow(t, fmt.Sprintf("unknown tool %q: %v", tool, err))
		}
	}
	// A kill -9 of the child in the middle of a call: a synthetic failure
	// and a restart.
	c, err := h.Call(context.Background(), "hang", nil, host.WithInput())
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(skulktest.Timeout):
		require.FailNow(t, "handler did not start")
	}
	require.NoError(t, syscall.Kill(h.Children()[0].PID, syscall.SIGKILL))
	if _, err := c.Wait(); err == nil {
		require.FailNow(t, "a killed child's call completed")
	}
	skulktest.WaitRestart(t, h, 0, 1)
	require.NoError(t, h.FlushObservers(context.Background()))

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
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "skulk_calls_total", "skulk_child_restarts_total", "skulk_calls_in_flight"))
	fams := gathered(t, reg)
	var timed uint64
	for _, mm := range fams["skulk_call_duration_seconds"].GetMetric() {
		timed += mm.GetHistogram().GetSampleCount()
	}
	assert.EqualValuesf(t, 9, timed, "skulk_call_duration_seconds counts %d calls, want 9", timed)
	for _, mm := range fams["skulk_call_duration_seconds"].GetMetric() {
		for _, l := range mm.GetLabel() {
			if l.GetName() == "tool" && strings.HasPrefix(l.GetValue(), "nope") {
				assert.Fail(t, fmt.Sprintf("skulk_call_duration_seconds has a series for tool %q, which no child declared", l.GetValue()))
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
		if want := state == "ready"; (mm.GetGauge().GetValue() == 1) != want {
			assert.Fail(t, fmt.Sprintf("skulk_child_state{state=%q} = %v", state, mm.GetGauge().GetValue()))
		}
	}
	if n := testutil.CollectAndCount(m, "skulk_child_state"); n != 5 {
		assert.Fail(t, fmt.Sprintf("skulk_child_state has %d series for one slot, want one per state (5)", n))
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
	require.NoError(t, err)
	<-started
	const want = `
# HELP skulk_calls_in_flight Calls holding a stream slot of a child now.
# TYPE skulk_calls_in_flight gauge
skulk_calls_in_flight 1
`
	assert.NoError(t, testutil.CollectAndCompare(m, strings.NewReader(want), "skulk_calls_in_flight"))
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
			require.NoError(t, m.Observe(context.Background(), e))
		}
	}
	end("c1", "ok", "journal_start") // before Watch: no catalogue to look in
	m.Watch(h)
	end("c2", "ok", "journal_start")
	end("c3", "random-1", "journal_start")
	end("c4", "random-2", "invalid")
	end("c5", "random-3", "unknown_tool")

	const want = `
# HELP skulk_calls_total Calls ended, by tool, outcome (completed, failed, cancelled, refused), code (ok or the error code) and synthetic (the host made the outcome up).
# TYPE skulk_calls_total counter
skulk_calls_total{code="invalid_frame",outcome="refused",synthetic="false",tool="_unknown"} 4
skulk_calls_total{code="invalid_frame",outcome="refused",synthetic="false",tool="ok"} 1
`
	assert.NoError(t, testutil.CollectAndCompare(m, strings.NewReader(want), "skulk_calls_total"))
	if n := testutil.CollectAndCount(m, "skulk_call_duration_seconds"); n != 2 {
		assert.Fail(t, fmt.Sprintf("skulk_call_duration_seconds has %d series, want 2 (ok and _unknown)", n))
	}
}
