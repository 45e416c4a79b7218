package hostmetrics_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/hostmetrics"
	"github.com/skulkrt/skulk/internal/eventstore"
	"github.com/skulkrt/skulk/skulktest"
)

// echoTools has "echo": every caller chunk comes back as a chunk with the
// same payload and media; and "spew": n empty chunks.
func echoTools() child.Options {
	return child.Options{Tools: []child.Tool{{
		ID: "echo",
		Handler: func(_ context.Context, s *child.Stream) (frame.Payload, error) {
			for f, err := range s.Input() {
				if err != nil {
					return nil, err
				}
				if err := s.Send(f.Payload, f.Media); err != nil {
					return nil, err
				}
			}
			return nil, nil
		},
	}, {
		ID: "spew",
		Handler: func(_ context.Context, s *child.Stream) (frame.Payload, error) {
			var a struct{ N int }
			if err := s.Arguments().Decode(&a); err != nil {
				return nil, err
			}
			p := frame.MustPayload(map[string]any{"i": 0})
			for range a.N {
				if err := s.Send(p, nil); err != nil {
					return nil, err
				}
			}
			return nil, nil
		},
	}}}
}

func watched(t *testing.T, cfg host.Config, observe bool) (*host.Host, *hostmetrics.Metrics, *prometheus.Registry) {
	t.Helper()
	m := hostmetrics.New()
	if observe {
		cfg.CallLog.Observers = append(cfg.CallLog.Observers, m)
	}
	h := skulktest.StartProvider(t, echoTools(), cfg)
	m.Watch(h)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	return h, m, reg
}

// Frames and media bytes move by exactly what crossed the stream
// connections: the caller's started, chunks and completed one way, the
// provider's chunks and terminal the other (not the started the host gives
// the caller itself), and the media's bytes, not the payloads'.
func TestFramesAndMediaBytesByDirection(t *testing.T) {
	h, _, reg := watched(t, host.Config{}, true)
	ctx := context.Background()

	sizes := []int{1000, 0, 70_000, 1}
	c, err := h.Call(ctx, "echo", nil)
	require.NoError(t, err)
	media := 0
	for i, n := range sizes {
		m := &frame.InlineMedia{Data: make([]byte, n), MediaType: "application/octet-stream"}
		require.NoError(t, c.Send(ctx, frame.MustPayload(map[string]any{"i": i}), m))
		media += n
	}
	require.NoError(t, c.CloseSend())
	out := skulktest.Collect(t, c)
	if len(out.ChunkPayloads()) != len(sizes) {
		require.FailNow(t, fmt.Sprintf("echo gave %d chunks, want %d", len(out.ChunkPayloads()), len(sizes)))
	}
	// A plain request: invoke, started, two chunks and completed in one
	// write; two chunks back.
	p := frame.MustPayload(map[string]any{"text": "a payload's bytes are not media"})
	c, err = h.Call(ctx, "echo", nil, host.WithInput(p, p))
	require.NoError(t, err)
	if _, err := c.Wait(); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}

	toChild := (len(sizes) + 2) + (2 + 2)
	fromChild := (len(sizes) + 1) + (2 + 1)
	want := fmt.Sprintf(`
# HELP skulk_frames_total Frames that crossed the children's stream connections, by direction (caller_to_provider: written by the host; provider_to_caller: read by the host). Synthetic frames the host made up are not counted.
# TYPE skulk_frames_total counter
skulk_frames_total{direction="caller_to_provider"} %d
skulk_frames_total{direction="provider_to_caller"} %d
# HELP skulk_media_bytes_total Bytes of inline media (the frames' raw attachments, not payloads or headers) that crossed the children's stream connections, by direction.
# TYPE skulk_media_bytes_total counter
skulk_media_bytes_total{direction="caller_to_provider"} %d
skulk_media_bytes_total{direction="provider_to_caller"} %d
`, toChild, fromChild, media, media)
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "skulk_frames_total", "skulk_media_bytes_total"))
	st := h.Stats()
	assert.Equalf(t, uint64(toChild), st.CallerFrames, "Stats() = %+v", st)
	assert.Equalf(t, uint64(fromChild), st.ProviderFrames, "Stats() = %+v", st)
	assert.Equalf(t, uint64(media), st.CallerMediaBytes, "Stats() = %+v", st)
	assert.Equalf(t, uint64(media), st.ProviderMediaBytes, "Stats() = %+v", st)
}

// pingCount is the sample count of skulk_ping_rtt_seconds.
func pingCount(t *testing.T, reg *prometheus.Registry) (uint64, float64) {
	t.Helper()
	f := gathered(t, reg)["skulk_ping_rtt_seconds"]
	require.Falsef(t, f == nil || len(f.GetMetric()) != 1, "skulk_ping_rtt_seconds: %v", f)
	hist := f.GetMetric()[0].GetHistogram()
	var last uint64
	for _, b := range hist.GetBucket() { // cumulative, never more than the count
		require.Falsef(t, b.GetCumulativeCount() < last || b.GetCumulativeCount() > hist.GetSampleCount(), "skulk_ping_rtt_seconds buckets are not cumulative: %v", hist)
		last = b.GetCumulativeCount()
	}
	return hist.GetSampleCount(), hist.GetSampleSum()
}

// Every answered ping adds a round trip to the histogram. The child is
// idle, so it is pinged every IdleHealthInterval, here the interval.
func TestPingRTTHistogramGrows(t *testing.T) {
	_, _, reg := watched(t, host.Config{HealthInterval: 20 * time.Millisecond, IdleHealthInterval: 20 * time.Millisecond}, false)
	deadline := time.Now().Add(skulktest.Timeout)
	first, _ := pingCount(t, reg)
	for {
		n, sum := pingCount(t, reg)
		if n >= first+3 {
			require.Falsef(t, sum <= 0, "%d round trips summing to %v s", n, sum)
			return
		}
		require.Falsef(t, time.Now().After(deadline), "ping round trips went from %d to %d in %v at a 20 ms interval", first, n, skulktest.Timeout)
		time.Sleep(20 * time.Millisecond)
	}
}

// lastSeq is the number of events in c's tree once it ended: its end
// event's Seq.
func lastSeq(c *host.Call) uint64 {
	var seq uint64
	for e := range c.Events() {
		seq = e.Seq
	}
	return seq
}

// An observer that falls behind loses the events past its queue of
// 10,000; one that fails loses every event after the one it failed on.
// Both show in the loss counters, by exactly the events lost.
func TestObserverLossesShow(t *testing.T) {
	release := make(chan struct{})
	blocked := eventstore.ObserverFunc(func(ctx context.Context, _ calllog.Event) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	failing := eventstore.ObserverFunc(func(context.Context, calllog.Event) error { return errors.New("observer down") })
	h, _, reg := watched(t, host.Config{CallLog: calllog.Options{Observers: []calllog.Observer{blocked, failing}}}, false)
	defer close(release) // before the host's Close, registered earlier

	c, err := h.Call(context.Background(), "spew", frame.MustPayload(map[string]any{"n": 12_000}), host.WithInput())
	require.NoError(t, err)
	if _, err := c.Wait(); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	n := lastSeq(c)
	require.Falsef(t, n <= 12_000, "the call's tree has %d events", n)
	// The blocked observer holds 7,500 (one it is given, the rest
	// queued): the chunks that fit in the three quarters of its queue
	// beside the room held for the call's end, and that end; the failing
	// one had the first. The failing one's losses
	// are counted as its runner discards them: wait for the count.
	want := fmt.Sprintf(`
# HELP skulk_observer_events_lost_total Call-log events an observer was not given: its queue of 10,000 was full, or it had failed. Includes this collector's own call counting.
# TYPE skulk_observer_events_lost_total counter
skulk_observer_events_lost_total %d
# HELP skulk_observers_failed_total Call-log observers that returned an error or panicked, and are given nothing more.
# TYPE skulk_observers_failed_total counter
skulk_observers_failed_total 1
`, (n-7_500)+(n-1))
	var cmpErr error
	for deadline := time.Now().Add(skulktest.Timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cmpErr = testutil.GatherAndCompare(reg, strings.NewReader(want), "skulk_observer_events_lost_total", "skulk_observers_failed_total"); cmpErr == nil {
			break
		}
	}
	assert.NoError(t, cmpErr)
}

// downStore is a journal store that is never reachable.
type downStore struct{}

var errDown = errors.New("store down")

func (downStore) Claim(context.Context, string, string) (calllog.Claim, error) {
	return calllog.Claim{}, errDown
}
func (downStore) Keep(context.Context, calllog.Claim, []calllog.Event) error { return errDown }
func (downStore) EventsAfter(context.Context, string, uint64, int) ([]calllog.Event, error) {
	return nil, errDown
}

// A journal whose store fails shows its failed sends, and, once its queue
// is full, exactly the events it could not keep.
func TestJournalLossesShow(t *testing.T) {
	j := &calllog.Journal{Store: downStore{}, Queue: 2}
	h, _, reg := watched(t, host.Config{CallLog: calllog.Options{Journal: j}}, true)
	c, err := h.Call(context.Background(), "echo", nil, host.WithInput())
	require.NoError(t, err)
	if _, err := c.Wait(); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	// The two queued events wait for the store; the rest were dropped.
	lost := lastSeq(c) - 2
	value := func(name string) float64 { return gathered(t, reg)[name].GetMetric()[0].GetCounter().GetValue() }
	for deadline := time.Now().Add(skulktest.Timeout); ; time.Sleep(10 * time.Millisecond) {
		if value("skulk_journal_send_errors_total") >= 2 {
			break
		}
		require.False(t, time.Now().After(deadline), "skulk_journal_send_errors_total stayed under 2 with the store down")
	}
	if v := value("skulk_journal_events_lost_total"); v != float64(lost) {
		assert.Fail(t, fmt.Sprintf("skulk_journal_events_lost_total = %v, want %d", v, lost))
	}
}
