// Package hostmetrics offers a Skulk host's metrics as a
// prometheus.Collector: calls by tool, outcome, code and synthetic, call
// durations, calls in flight, child restarts, child states and stuck
// handlers (docs/operations.md lists each with an example alert).
//
// A Metrics is two things at once: a calllog.Observer, which counts the
// calls of the host whose call log it observes, and a Collector, which
// reads the pool's live state (Host.Children) at each scrape. It is
// registered on a registry the program gives, never on the global one:
//
//	m := hostmetrics.New()
//	cfg.CallLog.Observers = append(cfg.CallLog.Observers, m)
//	h, err := host.Start(ctx, cfg)
//	if err != nil { ... }
//	m.Watch(h)
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(m)
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// The call counters are fed by the call log's observer queue: they are
// exact unless the observer falls more than 10,000 events behind
// (calllog.Observer), and a scrape sees a call once its end event was
// observed (Host.Drain waits for that). Labels are bounded: no call or
// tree id, only tool ids, outcomes, codes and slot numbers.
package hostmetrics

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/host"
)

// maxTracked bounds the calls whose start time is kept for their duration:
// a call whose end event the observer lost keeps its entry, so past this
// many, new calls are counted but not timed.
const maxTracked = 1 << 16

// The label values of a call's outcome.
const (
	OutcomeCompleted = "completed"
	OutcomeFailed    = "failed"
	OutcomeCancelled = "cancelled"
	OutcomeRefused   = "refused"
)

// Metrics counts a host's calls (as its calllog.Observer) and reports them
// with the pool's state (as a prometheus.Collector). Make it with New.
type Metrics struct {
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	host     atomic.Pointer[host.Host]

	started map[string]time.Time // owned by Observe's goroutine (one per observer)

	inFlight, restarts, state, stuck *prometheus.Desc
}

// New returns Metrics that count nothing yet: add it to the host's
// Config.CallLog.Observers, call Watch once the host started, and register
// it on a registry.
func New() *Metrics {
	return &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skulk_calls_total",
			Help: "Calls ended, by tool, outcome (completed, failed, cancelled, refused), code (ok or the error code) and synthetic (the host made the outcome up).",
		}, []string{"tool", "outcome", "code", "synthetic"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "skulk_call_duration_seconds",
			Help:    "Time from a call's start to its end, by tool and outcome.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10), // 0.5 ms to about 131 s
		}, []string{"tool", "outcome"}),
		started:  make(map[string]time.Time),
		inFlight: prometheus.NewDesc("skulk_calls_in_flight", "Calls holding a stream slot of a child now.", nil, nil),
		restarts: prometheus.NewDesc("skulk_child_restarts_total", "Restarts of a pool slot's child since the host started (recycles included).", []string{"slot"}, nil),
		state:    prometheus.NewDesc("skulk_child_state", "1 for the state a pool slot is in, 0 for the others.", []string{"slot", "state"}, nil),
		stuck:    prometheus.NewDesc("skulk_child_stuck_handlers", "Cancelled handlers still running past their grace, from the child's latest pong.", []string{"slot"}, nil),
	}
}

// Watch makes the collector report h's pool (in flight, restarts, states,
// stuck handlers); until it is called, only the call counters are
// reported.
func (m *Metrics) Watch(h *host.Host) { m.host.Store(h) }

// Observe counts e: it is the calllog.Observer side of Metrics. Programs
// are not counted (their steps are).
func (m *Metrics) Observe(_ context.Context, e calllog.Event) error {
	if e.Program {
		return nil
	}
	if e.Kind == calllog.KindStarted {
		if len(m.started) < maxTracked {
			m.started[e.Call] = e.At
		}
		return nil
	}
	if !e.Kind.IsEnd() {
		return nil
	}
	outcome, code, synthetic := outcomeOf(&e)
	m.calls.WithLabelValues(e.Tool, outcome, code, strconv.FormatBool(synthetic)).Inc()
	if at, ok := m.started[e.Call]; ok {
		delete(m.started, e.Call)
		m.duration.WithLabelValues(e.Tool, outcome).Observe(e.At.Sub(at).Seconds())
	}
	return nil
}

func outcomeOf(e *calllog.Event) (outcome, code string, synthetic bool) {
	code = "ok"
	if e.Error != nil {
		code, synthetic = e.Error.Code.String(), e.Error.Synthetic
	}
	switch {
	case e.Refused != "":
		return OutcomeRefused, code, synthetic
	case e.Kind == calllog.KindDone:
		return OutcomeCompleted, code, synthetic
	case e.Kind == calllog.KindCancelled:
		return OutcomeCancelled, code, synthetic
	}
	return OutcomeFailed, code, synthetic
}

// Describe sends the descriptors of every metric Metrics reports.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.calls.Describe(ch)
	m.duration.Describe(ch)
	ch <- m.inFlight
	ch <- m.restarts
	ch <- m.state
	ch <- m.stuck
}

// states are the label values of skulk_child_state.
var states = []host.ChildState{host.StateStarting, host.StateReady, host.StateDraining, host.StateDead, host.StateDown}

// Collect sends the metrics' current values: the counters, and the
// watched host's pool as it is now.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.calls.Collect(ch)
	m.duration.Collect(ch)
	h := m.host.Load()
	if h == nil {
		return
	}
	running := 0
	for i, c := range h.Children() {
		slot := strconv.Itoa(i)
		running += c.Running
		ch <- prometheus.MustNewConstMetric(m.restarts, prometheus.CounterValue, float64(c.Restarts), slot)
		ch <- prometheus.MustNewConstMetric(m.stuck, prometheus.GaugeValue, float64(c.Stuck), slot)
		for _, s := range states {
			v := 0.0
			if c.State == s {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(m.state, prometheus.GaugeValue, v, slot, s.String())
		}
	}
	ch <- prometheus.MustNewConstMetric(m.inFlight, prometheus.GaugeValue, float64(running))
}
