package logtest

import (
	"context"
	"log/slog"
	"slices"
	"sync"
)

// Record is one log record as a Capture keeps it: its message and its
// attributes (those of With included), each value as a string.
type Record struct {
	Msg   string
	Attrs map[string]string
}

// Capture is a slog.Handler that keeps every record, at every level, for a
// test to read back (Records). It keeps all of them: give it to a logger
// of a test's own, whose output the test bounds. Groups are ignored (the
// host and the child SDK use none). Safe for concurrent use.
type Capture struct {
	mu    *sync.Mutex
	recs  *[]Record
	attrs []slog.Attr
}

// NewCapture returns an empty Capture.
func NewCapture() *Capture { return &Capture{mu: &sync.Mutex{}, recs: &[]Record{}} }

// Enabled implements slog.Handler: every level is kept.
func (c *Capture) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (c *Capture) Handle(_ context.Context, r slog.Record) error {
	rec := Record{Msg: r.Message, Attrs: map[string]string{}}
	for _, a := range c.attrs {
		rec.Attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.Attrs[a.Key] = a.Value.String()
		return true
	})
	c.mu.Lock()
	*c.recs = append(*c.recs, rec)
	c.mu.Unlock()
	return nil
}

// WithAttrs implements slog.Handler.
func (c *Capture) WithAttrs(as []slog.Attr) slog.Handler {
	return &Capture{mu: c.mu, recs: c.recs, attrs: append(slices.Clip(c.attrs), as...)}
}

// WithGroup implements slog.Handler; the group is ignored.
func (c *Capture) WithGroup(string) slog.Handler { return c }

// Records returns the records kept so far, in the order they were handled.
func (c *Capture) Records() []Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(*c.recs)
}
