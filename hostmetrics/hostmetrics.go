// Package hostmetrics offers a Skulk host's metrics as a
// prometheus.Collector: calls by tool, outcome, code and synthetic, call
// durations, calls in flight, frames and media bytes by direction, child
// restarts, child states, stuck handlers, ping round trips, and what the
// call log lost (docs/operations.md lists each with an example alert).
//
// A Metrics is two things at once: a calllog.Observer, which counts the
// calls of the host whose call log it observes, and a Collector, which
// reads the host's live state (Host.Children, Host.Stats) at each scrape.
// It is registered on a registry the program gives, never on the global
// one:
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
// (calllog.Observer; skulk_observer_events_lost_total then shows it), and
// a scrape sees a call once its end event was observed (Host.FlushObservers waits
// for that). Everything else is read from the host when scraped, so it
// costs nothing between scrapes. Labels are bounded: no call or tree id,
// only tool ids, outcomes, codes, directions and slot numbers. A tool id
// is a label value only when the watched host offers that tool
// (Host.Tools) as the call's end is counted; a call of any other tool
// (one a caller named that no child declared, or one ended before Watch)
// is counted under the tool UnknownTool, so callers cannot make series.
//
// # Why a Collector and not an OpenTelemetry MeterProvider
//
// Most of what an operator of a supervisor looks at is the pool's state
// now: which slot is up, how many calls hold a stream, how many restarts.
// A Collector reads it from the host at scrape time, so the host keeps no
// second copy, runs no periodic reader and registers no callbacks; with
// no scrape, nothing runs. The registry is the program's own, so two
// hosts in one program are two registries (or two label sets through
// prometheus.WrapRegistererWith), and tests read it with
// prometheus/testutil. A program that exports through OpenTelemetry
// instead can read the same registry into its MeterProvider with
// OpenTelemetry's Prometheus bridge (go.opentelemetry.io/contrib/bridges/prometheus),
// whereas metrics built on a MeterProvider would make every user of this
// package configure the OpenTelemetry SDK (a reader and an exporter) just
// to get a /metrics page. Traces are the other way round: they cross the
// process boundary, so they use OpenTelemetry (host.Config.TracerProvider).
package hostmetrics

import (
	"context"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/internal/childstate"
	"github.com/skulkrt/skulk/wire"
)

// maxTracked bounds the calls whose start time is kept for their duration:
// a call whose end event the observer lost keeps its entry, so past this
// many, new calls are counted but not timed.
const maxTracked = 1 << 16

// UnknownTool is the tool label of a call of a tool the watched host does
// not offer. A tool really named "_unknown" shares its series.
const UnknownTool = "_unknown"

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
	offered offeredTools         // owned by Observe's goroutine

	inFlight, restarts, state, stuck *prometheus.Desc
	frames, media, pingRTT           *prometheus.Desc
	observerLost, observersFailed    *prometheus.Desc
	journalLost, journalSendErrors   *prometheus.Desc
}

// The label values of the direction label, the wire's names of the two
// directions (frame.Direction).
var (
	toChild   = frame.CallerToProvider.String()
	fromChild = frame.ProviderToCaller.String()
)

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
		frames: prometheus.NewDesc("skulk_frames_total",
			"Frames that crossed the children's stream connections, by direction (caller_to_provider: written by the host; provider_to_caller: read by the host). Synthetic frames the host made up are not counted.",
			[]string{"direction"}, nil),
		media: prometheus.NewDesc("skulk_media_bytes_total",
			"Bytes of inline media (the frames' raw attachments, not payloads or headers) that crossed the children's stream connections, by direction.",
			[]string{"direction"}, nil),
		pingRTT: prometheus.NewDesc("skulk_ping_rtt_seconds",
			"Round trips of the health pings the children answered, from the ping written to the pong read.", nil, nil),
		observerLost: prometheus.NewDesc("skulk_observer_events_lost_total",
			"Call-log events an observer was not given: its queue of 10,000 was full, or it had failed. Includes this collector's own call counting.", nil, nil),
		observersFailed: prometheus.NewDesc("skulk_observers_failed_total",
			"Call-log observers that returned an error or panicked, and are given nothing more.", nil, nil),
		journalLost: prometheus.NewDesc("skulk_journal_events_lost_total",
			"Call-log events the journal did not keep: its queue was full, or a tree's writer stopped with them queued.", nil, nil),
		journalSendErrors: prometheus.NewDesc("skulk_journal_send_errors_total",
			"Sends to the journal's store that failed or went unanswered (each is retried unless the writer stops).", nil, nil),
	}
}

// Watch makes the collector report h's pool (in flight, restarts, states,
// stuck handlers); until it is called, only the call counters are
// reported.
func (m *Metrics) Watch(h *host.Host) { m.host.Store(h) }

// WantsKind reports whether Metrics needs events of kind k: a call's
// started and end events (calllog.Observer's optional WantsKind), so that its chunks cost the
// call log nothing for it.
func (m *Metrics) WantsKind(k calllog.Kind) bool { return k == calllog.KindStarted || k.IsEnd() }

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
	tool := m.offered.label(m.host.Load(), e.Tool)
	m.calls.WithLabelValues(tool, outcome, code, strconv.FormatBool(synthetic)).Inc()
	if at, ok := m.started[e.Call]; ok {
		delete(m.started, e.Call)
		m.duration.WithLabelValues(tool, outcome).Observe(e.At.Sub(at).Seconds())
	}
	return nil
}

// offeredTools is the set of tool ids of one host catalogue, rebuilt when
// the host's catalogue changes (a child started with another one). Its
// size is the catalogue's: at most the 4,096 tools a hello may declare
// (docs/protocol.md §3).
type offeredTools struct {
	from []wire.Tool // the catalogue the set was built from (Host.Tools)
	ids  map[string]struct{}
}

// label returns tool if h offers it, UnknownTool otherwise. The refusal
// class of an unknown tool ("unknown_tool") is not enough: a call of an
// unknown tool that a required journal refuses first is refused as
// "journal_start" with the caller's tool id.
func (o *offeredTools) label(h *host.Host, tool string) string {
	if h == nil {
		return UnknownTool
	}
	list := h.Tools() // shared, never modified: a new catalogue is a new slice
	if len(list) == 0 {
		return UnknownTool
	}
	if len(list) != len(o.from) || &list[0] != &o.from[0] {
		o.from, o.ids = list, make(map[string]struct{}, len(list))
		for i := range list {
			o.ids[list[i].ID] = struct{}{}
		}
	}
	if _, ok := o.ids[tool]; ok {
		return tool
	}
	return UnknownTool
}

func outcomeOf(e *calllog.Event) (outcome, code string, synthetic bool) {
	code = "ok"
	if e.Error != nil {
		code, synthetic = e.Error.Code.String(), e.Error.Synthetic
	}
	switch {
	case e.Refused != "":
		return OutcomeRefused, code, synthetic
	case e.Kind == calllog.KindCompleted:
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
	ch <- m.frames
	ch <- m.media
	ch <- m.pingRTT
	ch <- m.observerLost
	ch <- m.observersFailed
	ch <- m.journalLost
	ch <- m.journalSendErrors
}

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
		for _, s := range childstate.Names() { // every ChildInfo.State: skulk_child_state's labels
			v := 0.0
			if c.State == s {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(m.state, prometheus.GaugeValue, v, slot, s)
		}
	}
	ch <- prometheus.MustNewConstMetric(m.inFlight, prometheus.GaugeValue, float64(running))

	st := h.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(m.frames, st.CallerFrames, toChild)
	counter(m.frames, st.ProviderFrames, fromChild)
	counter(m.media, st.CallerMediaBytes, toChild)
	counter(m.media, st.ProviderMediaBytes, fromChild)
	counter(m.observerLost, st.ObserverEventsLost)
	counter(m.observersFailed, st.ObserversFailed)
	counter(m.journalLost, st.JournalEventsLost)
	counter(m.journalSendErrors, st.JournalSendErrors)
	ch <- pingHistogram(m.pingRTT, &st)
}

// pingHistogram turns the host's ping histogram (Counts[i] in
// [Buckets[i], Buckets[i+1])) into Prometheus's cumulative buckets, each
// named by its upper bound; the unbounded last bucket is the count.
func pingHistogram(d *prometheus.Desc, st *host.Stats) prometheus.Metric {
	hist := &st.PingRTT
	buckets := make(map[float64]uint64, len(hist.Counts))
	var n uint64
	for i, c := range hist.Counts {
		n += c
		if upper := hist.Buckets[i+1]; !math.IsInf(upper, 1) {
			buckets[upper] = n
		}
	}
	return prometheus.MustNewConstHistogram(d, n, st.PingRTTSum.Seconds(), buckets)
}
