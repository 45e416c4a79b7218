package host

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// The rate at which a child's output lines are forwarded to
// Config.Logger: a burst of childLogBurst lines, then childLogRate lines
// a second. A child that writes faster loses the lines past it from the
// log (not from the stderr tail, which keeps the latest 64 KiB whatever
// the rate), and the host says how many it dropped.
const (
	childLogBurst = 1000
	childLogRate  = 200
)

// logDropped is the message of the record that counts the output lines of
// a child that were not forwarded (docs/operations.md, "Logs").
const logDropped = "child output dropped"

// outputLimit is one child's allowance of forwarded output lines: a token
// bucket shared by its stdout and stderr forwarders. Safe for concurrent
// use.
type outputLimit struct {
	mu      sync.Mutex
	tokens  float64      // lines that may be forwarded now, at most childLogBurst
	last    time.Time    // when tokens was last refilled
	dropped int64        // lines dropped since the last report
	lastRep time.Time    // when the last report was made
	report  slog.Handler // where flush reports: the forwarders' handler, set by the first WithAttrs
}

func newOutputLimit() *outputLimit {
	return &outputLimit{tokens: childLogBurst, last: time.Now()}
}

// take reports whether one more line may be forwarded at now, and how
// many lines were dropped and are to be reported before it: losses are
// reported with the first line forwarded after them, at most once per
// reportEvery, so that a child flooding for long gives one report a
// second, not one per line that gets through.
func (l *outputLimit) take(now time.Time) (ok bool, dropped int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tokens = min(childLogBurst, l.tokens+now.Sub(l.last).Seconds()*childLogRate)
	l.last = now
	if l.tokens < 1 {
		l.dropped++
		return false, 0
	}
	l.tokens--
	if l.dropped > 0 && now.Sub(l.lastRep) >= reportEvery {
		dropped, l.dropped, l.lastRep = l.dropped, 0, now
	}
	return true, dropped
}

// reportEvery is the least time between two reports of dropped lines of
// one child.
const reportEvery = time.Second

// flush reports the lines dropped since the last report, if any: called
// once the child's output has ended (its forwarders returned).
func (l *outputLimit) flush() {
	l.mu.Lock()
	dropped, h := l.dropped, l.report
	l.dropped = 0
	l.mu.Unlock()
	if dropped > 0 && h != nil {
		reportDropped(h, time.Now(), dropped)
	}
}

func reportDropped(h slog.Handler, at time.Time, n int64) {
	r := slog.NewRecord(at, slog.LevelWarn, logDropped, 0)
	r.AddAttrs(slog.Int64("dropped", n), slog.Int("rate", childLogRate), slog.Int("burst", childLogBurst))
	if h.Enabled(context.Background(), slog.LevelWarn) {
		_ = h.Handle(context.Background(), r)
	}
}

// limitedOutput is the handler a child's forwarders log through: records
// of its output lines (logChildOutput) pass while the child's allowance
// lasts, and the first one after a loss is preceded by a logDropped
// record saying how many went; every other record passes.
type limitedOutput struct {
	slog.Handler
	l *outputLimit
}

// limitOutput returns h limited by l. The first handler that carries the
// child's attributes (WithAttrs) is the one the final report goes to.
func limitOutput(h slog.Handler, l *outputLimit) slog.Handler {
	return &limitedOutput{Handler: h, l: l}
}

func (h *limitedOutput) Handle(ctx context.Context, r slog.Record) error {
	if r.Message != logChildOutput {
		return h.Handler.Handle(ctx, r)
	}
	ok, dropped := h.l.take(r.Time)
	if dropped > 0 {
		reportDropped(h.Handler, r.Time, dropped)
	}
	if !ok {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h *limitedOutput) WithAttrs(as []slog.Attr) slog.Handler {
	inner := h.Handler.WithAttrs(as)
	h.l.mu.Lock()
	if h.l.report == nil {
		h.l.report = inner // the forwarders' handler, with the child's id and pid
	}
	h.l.mu.Unlock()
	return &limitedOutput{Handler: inner, l: h.l}
}

func (h *limitedOutput) WithGroup(name string) slog.Handler {
	return &limitedOutput{Handler: h.Handler.WithGroup(name), l: h.l}
}
