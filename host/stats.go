package host

import (
	"math"
	"runtime/metrics"
	"sync/atomic"
	"time"

	"github.com/skulkrt/skulk/frame"
)

// Stats are a host's counters since Start, as Host.Stats reports them.
// Every counter only grows.
type Stats struct {
	// CallerFrames counts the caller frames (caller_to_provider: started,
	// chunks, terminals) the host wrote to its children's stream
	// connections; ProviderFrames the provider frames (provider_to_caller)
	// it read from them. Neither counts the provider started the host
	// gives each caller itself, nor a synthetic terminal, nor the invoke
	// and end packets, which are not frames. A provider frame is counted
	// before its caller can receive it: once a caller has its call's
	// terminal, Stats includes every frame the child sent up to it.
	CallerFrames, ProviderFrames uint64
	// CallerMediaBytes and ProviderMediaBytes count the bytes of inline
	// media (the packets' raw attachments) in those frames: the media's
	// Data, not payloads, headers or blob references.
	CallerMediaBytes, ProviderMediaBytes uint64
	// PingRTT is the distribution of the round trips of the health pings
	// the children answered (ping written to pong read), in seconds:
	// Counts[i] round trips took at least Buckets[i] and less than
	// Buckets[i+1]. The buckets are the same at every call; the last one
	// is unbounded (+Inf).
	PingRTT metrics.Float64Histogram
	// PingRTTSum is the sum of those round trips.
	PingRTTSum time.Duration
	// ObserverEventsLost counts call-log events an observer was not given:
	// its queue (10,000 events, calllog.Observer) was full, or it had
	// failed. ObserversFailed counts observers that returned an error or
	// panicked, and so are given nothing more.
	ObserverEventsLost, ObserversFailed uint64
	// JournalEventsLost counts call-log events a journal did not keep: its
	// queue (calllog.Journal.Queue, QueueBytes) was full, or a tree's
	// writer stopped (an unusable store, a takeover, Close) with them
	// queued.
	// JournalSendErrors counts sends to the journal's store that failed or
	// went unanswered (each is retried unless the writer stops).
	JournalEventsLost, JournalSendErrors uint64
	// JournalValuesDropped counts call starts and ends a journal kept
	// without their payload's value, its queue having room for the event
	// but not for the value (calllog.Content.ValueDropped).
	JournalValuesDropped uint64

	// Cgroups is true when every child runs in a cgroup of its own
	// (Linux), false when the host could not make cgroups or was told not
	// to (Config.NoCgroups); CgroupsUnavailable then says why, and the
	// guardian and /proc alone contain the children (docs/operations.md,
	// "Containment"). CgroupLayout names the layout in use: "v2",
	// "hybrid", "v1" (limits only) or "". These do not change after Start.
	Cgroups            bool
	CgroupLayout       string
	CgroupsUnavailable string
}

// pingBounds are the lower bounds of Stats.PingRTT's buckets, in seconds:
// 100 µs to HealthTimeout's default (5 s), then unbounded.
var pingBounds = [...]float64{0, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5}

// traffic counts the frames and inline media bytes that cross the stream
// connections. Atomic adds only, on the paths that write or read a frame
// anyway.
type traffic struct {
	callerFrames, callerMedia     atomic.Uint64
	providerFrames, providerMedia atomic.Uint64
}

func mediaLen(m frame.Media) uint64 {
	if im, ok := m.(*frame.InlineMedia); ok && im != nil {
		return uint64(len(im.Data))
	}
	return 0
}

// sent counts a caller frame written.
func (t *traffic) sent(f *frame.Frame) {
	t.callerFrames.Add(1)
	if n := mediaLen(f.Media); n > 0 {
		t.callerMedia.Add(n)
	}
}

// readCount is what a reader read and has not yet added to the host's
// counters: provider frames and the bytes of their inline media.
type readCount struct {
	frames int
	media  uint64
}

// received adds c to the provider counters and zeroes it.
func (t *traffic) received(c *readCount) {
	if c.frames > 0 {
		t.providerFrames.Add(uint64(c.frames))
	}
	if c.media > 0 {
		t.providerMedia.Add(c.media)
	}
	*c = readCount{}
}

// pingHist is the host's ping round-trip histogram; guarded by Host.mu
// (at most one pong a HealthInterval per child).
type pingHist struct {
	counts [len(pingBounds)]uint64
	sum    time.Duration
}

func (p *pingHist) add(d time.Duration) {
	s := d.Seconds()
	i := len(pingBounds) - 1
	for i > 0 && s < pingBounds[i] {
		i--
	}
	p.counts[i]++
	p.sum += d
}

// Stats returns the host's counters: frames and media bytes by direction,
// ping round trips, and what the call log lost. Safe for concurrent use;
// it takes the pool's lock briefly, as Children does.
func (h *Host) Stats() Stats {
	t := &h.traffic
	s := Stats{
		CallerFrames: t.callerFrames.Load(), CallerMediaBytes: t.callerMedia.Load(),
		ProviderFrames: t.providerFrames.Load(), ProviderMediaBytes: t.providerMedia.Load(),
	}
	l := h.rec.Losses()
	s.ObserverEventsLost, s.ObserversFailed = l.ObserverEvents, l.ObserversFailed
	s.JournalEventsLost, s.JournalSendErrors = l.JournalEvents, l.JournalSendErrors
	s.JournalValuesDropped = l.JournalValues
	s.PingRTT = h.pingStats()
	cs := h.contain.Status()
	s.Cgroups, s.CgroupLayout, s.CgroupsUnavailable = cs.Cgroups, cs.Layout, cs.Unavailable
	h.mu.Lock()
	s.PingRTTSum = h.pings.sum
	h.mu.Unlock()
	return s
}

// pingStats copies the ping histogram out as Stats.PingRTT.
func (h *Host) pingStats() metrics.Float64Histogram {
	b := append(make([]float64, 0, len(pingBounds)+1), pingBounds[:]...)
	h.mu.Lock()
	defer h.mu.Unlock()
	return metrics.Float64Histogram{Counts: append([]uint64(nil), h.pings.counts[:]...), Buckets: append(b, math.Inf(1))}
}
