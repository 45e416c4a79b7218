package host

import (
	"context"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skulkrt/skulk/frame"
)

// capture is a slog.Handler that keeps every record with its attributes
// (those of With included), flattened to key=value strings. Safe for
// concurrent use.
type capture struct {
	mu    *sync.Mutex
	recs  *[]captured
	attrs []slog.Attr
}

type captured struct {
	msg   string
	attrs map[string]string
}

func newCapture() *capture { return &capture{mu: &sync.Mutex{}, recs: &[]captured{}} }

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }

func (c *capture) Handle(_ context.Context, r slog.Record) error {
	rec := captured{msg: r.Message, attrs: map[string]string{}}
	for _, a := range c.attrs {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	c.mu.Lock()
	*c.recs = append(*c.recs, rec)
	c.mu.Unlock()
	return nil
}

func (c *capture) WithAttrs(as []slog.Attr) slog.Handler {
	return &capture{mu: c.mu, recs: c.recs, attrs: append(slices.Clip(c.attrs), as...)}
}

func (c *capture) WithGroup(string) slog.Handler { return c } // the host uses no groups

func (c *capture) records() []captured {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(*c.recs)
}

// childLineIDs finds the call_id and tree_id of a child SDK record
// forwarded as a "child output" line (the child logs slog text).
var childLineIDs = regexp.MustCompile(`(?:^| )(call_id|tree_id)=(\S+)`)

// Every log record about a call, the host's and the child's, carries the
// call's id as call_id and its tree's as tree_id, across a call that fails,
// one cancelled, one whose handler ignores the cancel (the host ends it),
// one past its deadline and one whose child is killed; a record that
// names a call in any other attribute fails the test.
func TestLogRecordsCarryCallAndTree(t *testing.T) {
	logs := newCapture()
	cfg := fastHealth(realConfig())
	cfg.Logger = slog.New(logs)
	cfg.CancelGrace = 200 * time.Millisecond
	cfg.StuckLimit = -1 // the stuck handler leaves its child alone until the kill
	h, _ := testHost(t, cfg, 2*time.Minute)
	ctx := callCtx(t, time.Minute)
	trees := map[string]string{} // call id → tree id
	note := func(c *Call) { trees[c.ID()] = c.Tree() }

	// Fails: provider_error.
	c, err := h.Call(ctx, "fail", frame.MustPayload(map[string]any{"message": "no"}), WithInput())
	if err != nil {
		t.Fatal(err)
	}
	note(c)
	if _, err := c.Wait(); err == nil {
		t.Fatal("fail completed")
	}
	// Past its deadline: the child's timeout.
	dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	c, err = h.Call(dctx, "sleep", frame.MustPayload(map[string]any{"ms": 10_000}), WithInput())
	if err != nil {
		t.Fatal(err)
	}
	note(c)
	c.Wait()
	cancel()
	// The rest are steps of one program: their tree is not their own id.
	err = h.Program(ctx, "logs", func(ctx context.Context) error {
		// Cancelled, and the handler honours it.
		c, err := h.Call(ctx, "sleep", frame.MustPayload(map[string]any{"ms": 10_000}), WithInput())
		if err != nil {
			return err
		}
		note(c)
		time.Sleep(50 * time.Millisecond)
		c.Cancel()
		c.Wait()
		// Cancelled, and the handler ignores it: the child logs it as
		// stuck, the host ends the call with a synthetic cancelled.
		c, err = h.Call(ctx, "sleep", frame.MustPayload(map[string]any{"ms": 60_000, "ignore_cancel": true}), WithInput())
		if err != nil {
			return err
		}
		note(c)
		time.Sleep(50 * time.Millisecond)
		c.Cancel()
		if _, err := c.Wait(); err == nil {
			t.Error("a cancelled call completed")
		}
		// Killed: a synthetic unreachable.
		c, err = h.Call(ctx, "sleep", frame.MustPayload(map[string]any{"ms": 60_000}), WithInput())
		if err != nil {
			return err
		}
		note(c)
		time.Sleep(50 * time.Millisecond)
		if err := syscall.Kill(h.Children()[0].PID, syscall.SIGKILL); err != nil {
			return err
		}
		if _, err := c.Wait(); err == nil {
			t.Error("a killed child's call completed")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	hostAbout, childAbout := checkCallRecords(t, logs.records(), trees)
	// The kill ends a call by the host; the child logs the handler that
	// ignores its cancel.
	if hostAbout < 1 || childAbout < 1 {
		t.Errorf("%d host records and %d child records about calls; want at least 1 and 1", hostAbout, childAbout)
	}
}

// A child that breaks the protocol (a sequence gap) and one that sends no
// end after its terminal: the host's records about each call carry its
// call_id and tree_id.
func TestLogRecordsOfMisbehavingCalls(t *testing.T) {
	logs := newCapture()
	cfg := fastHealth(fakeConfig("ok"))
	cfg.Logger = slog.New(logs)
	cfg.EndGrace = 200 * time.Millisecond
	h, _ := testHost(t, cfg, time.Minute)
	ctx := callCtx(t, time.Minute)
	trees := map[string]string{}
	note := func(c *Call) { trees[c.ID()] = c.Tree() }
	var hostAbout int
	for _, tool := range []string{"gap", "noend"} {
		c, err := h.Call(ctx, tool, nil, WithInput())
		if err != nil {
			t.Fatal(err)
		}
		note(c)
		c.Wait()
	}
	// The end grace's warning comes after the terminal: wait for it.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		hostAbout, _ = checkCallRecords(t, logs.records(), trees)
		if hostAbout >= 3 || time.Now().After(deadline) {
			break
		}
	}
	if hostAbout < 3 { // the gap's violation and synthetic end, the missing end
		t.Errorf("%d host records about the gap and noend calls; want 3", hostAbout)
	}
}

// checkCallRecords fails the test for a record that names a call or tree
// of trees (call id to tree id) other than as call_id and tree_id, or whose
// call_id and tree_id do not match; it returns how many host records and
// forwarded child records name one.
func checkCallRecords(t *testing.T, recs []captured, trees map[string]string) (hostAboutCalls, childAboutCalls int) {
	t.Helper()
	ids := map[string]bool{}
	for call, tree := range trees {
		ids[call], ids[tree] = true, true
	}
	for _, r := range recs {
		if r.msg == logChildOutput {
			// The child SDK's own record, forwarded line by line.
			got := map[string]string{}
			for _, m := range childLineIDs.FindAllStringSubmatch(r.attrs["line"], -1) {
				got[m[1]] = m[2]
			}
			named := false
			for id := range ids {
				named = named || strings.Contains(r.attrs["line"], id)
			}
			if !named {
				continue
			}
			childAboutCalls++
			if tree, ok := trees[got[logCallID]]; !ok || got[logTreeID] != tree {
				t.Errorf("child record %q: call_id %q tree_id %q; want a call of the test and its tree", r.attrs["line"], got[logCallID], got[logTreeID])
			}
			continue
		}
		named := false
		for k, v := range r.attrs {
			if ids[v] && k != logCallID && k != logTreeID {
				t.Errorf("record %q names a call or tree as %q; the keys are %s and %s", r.msg, k, logCallID, logTreeID)
			}
			named = named || ids[v]
		}
		if !named {
			continue
		}
		hostAboutCalls++
		call, tree := r.attrs[logCallID], r.attrs[logTreeID]
		if want, ok := trees[call]; !ok || tree != want {
			t.Errorf("record %q: %s=%q %s=%q; want a call of the test and its tree", r.msg, logCallID, call, logTreeID, tree)
		}
	}
	return hostAboutCalls, childAboutCalls
}
