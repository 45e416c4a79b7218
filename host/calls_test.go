package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/eventstore"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// callingConfig runs the real child with relay, offering calls.
func callingConfig(calls Calls) Config {
	return Config{Command: childBin, Args: []string{"--test-tools", "--call-tools"}, Calls: calls}
}

// lookupTool is a host tool: {"word": w} gives {"word": w, "len": n}; it
// records the ToolCalls it was given.
type lookupTool struct {
	mu    sync.Mutex
	calls []ToolCall
	ran   atomic.Int32
}

func (l *lookupTool) tool() HostTool {
	return HostTool{
		Tool: wire.Tool{ID: "lookup", Description: "looks a word up",
			ArgumentsSchema: map[string]any{"type": "object", "required": []any{"word"},
				"properties": map[string]any{"word": map[string]any{"type": "string"}}}},
		Run: func(ctx context.Context, c *ToolCall) (frame.Payload, error) {
			l.ran.Add(1)
			l.mu.Lock()
			l.calls = append(l.calls, *c)
			l.mu.Unlock()
			var a struct {
				Word string `json:"word"`
			}
			if err := c.Arguments.Decode(&a); err != nil {
				return nil, err
			}
			if err := c.Send(ctx, frame.MustPayload(map[string]any{"text": "looking"}), nil); err != nil {
				return nil, err
			}
			return frame.MustPayload(map[string]any{"word": a.Word, "len": len(a.Word)}), nil
		},
	}
}

// events collects a call's events (its steps' included) to its end.
func events(c *Call) []calllog.Event {
	var evs []calllog.Event
	for e := range c.Events() {
		evs = append(evs, e)
	}
	return evs
}

// stepEnd returns the end event of the step of parent calling tool.
func stepEnd(t *testing.T, evs []calllog.Event, parent, tool string) calllog.Event {
	t.Helper()
	for _, e := range evs {
		if e.Tool == tool && e.Parent == parent && e.Kind.IsEnd() {
			return e
		}
	}
	require.FailNow(t, fmt.Sprintf("no end of a %s step of %s in %d events", tool, parent, len(evs)))
	return calllog.Event{}
}

// A handler calls a host-side Go function: it gets the result, the chunk
// streams through, the function is told the call and tree that made it,
// and the log shows the call as a step of the handler's call.
func TestCallHostTool(t *testing.T) {
	lt := &lookupTool{}
	h, _ := testHost(t, callingConfig(Calls{HostTools: []HostTool{lt.tool()}}), time.Minute)
	c, err := h.Call(callCtx(t, 30*time.Second), "relay", frame.MustPayload(map[string]any{"tool": "lookup", "args": map[string]any{"word": "fox"}}))
	require.NoError(t, err)
	var chunks []string
	for f, err := range c.Frames() {
		require.NoError(t, err)
		if f.Kind == frame.KindChunk {
			var p map[string]any
			require.NoError(t, f.Payload.Decode(&p))
			chunks = append(chunks, fmt.Sprint(p["text"]))
		}
	}
	res, err := c.Wait()
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, res.Decode(&got))
	assert.Equal(t, "fox", got["word"])
	assert.EqualValues(t, 3, got["len"])
	assert.Equal(t, []string{"looking"}, chunks)

	require.Len(t, lt.calls, 1)
	tc := lt.calls[0]
	assert.Equal(t, c.ID(), tc.Parent)
	assert.Equal(t, c.Tree(), tc.Tree)
	assert.Equal(t, c.Tree(), tc.ParentTree)
	assert.Equal(t, "c0.1", tc.Child)

	evs := events(c)
	end := stepEnd(t, evs, c.ID(), "lookup")
	assert.Equal(t, calllog.KindCompleted, end.Kind)
	assert.Equal(t, c.Tree(), end.Tree)
	last := evs[len(evs)-1]
	assert.Equal(t, c.ID(), last.Call, "the parent's end is the log's last event")
	assert.Greater(t, last.Seq, end.Seq)
}

// A host that offers nothing: the child's SDK refuses the call, nothing
// is sent, and relay fails with the typed refusal's text.
func TestCallRefusedWhenOff(t *testing.T) {
	h, _ := testHost(t, callingConfig(Calls{}), time.Minute)
	c, err := h.Call(callCtx(t, 30*time.Second), "relay", frame.MustPayload(map[string]any{"tool": "echo"}))
	require.NoError(t, err)
	_, err = c.Wait()
	var ce *frame.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, frame.CodeProviderError, ce.Code)
	assert.Contains(t, ce.Message, "offers no calls")
	assert.Len(t, events(c), 4, "started, request, output-less end: no step")
}

// A tool the host does not offer is refused by the SDK; one the host
// offers but whose arguments break its schema likewise, and the host tool
// never runs.
func TestCallNotOffered(t *testing.T) {
	lt := &lookupTool{}
	h, _ := testHost(t, callingConfig(Calls{HostTools: []HostTool{lt.tool()}}), time.Minute)
	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"tool": "echo"}, "not offered"},
		{map[string]any{"tool": "lookup", "args": map[string]any{"word": 3}}, "schema"},
	} {
		c, err := h.Call(callCtx(t, 30*time.Second), "relay", frame.MustPayload(tc.args))
		require.NoError(t, err)
		_, err = c.Wait()
		var ce *frame.Error
		require.ErrorAs(t, err, &ce)
		assert.Contains(t, ce.Message, tc.want)
	}
	assert.Zero(t, lt.ran.Load())
}

// A → B → A: a host tool that calls relay, which calls the host tool
// again, ends at the depth limit with an error naming the depth.
func TestCallLoopAtDepthLimit(t *testing.T) {
	var hp atomic.Pointer[Host]
	var runs atomic.Int32
	bounce := HostTool{Tool: wire.Tool{ID: "bounce"}, Run: func(ctx context.Context, c *ToolCall) (frame.Payload, error) {
		runs.Add(1)
		rc, err := hp.Load().Call(ctx, "relay", frame.MustPayload(map[string]any{"tool": "bounce"}))
		if err != nil {
			return nil, err
		}
		return rc.Wait()
	}}
	h, _ := testHost(t, callingConfig(Calls{HostTools: []HostTool{bounce}, MaxDepth: 4}), time.Minute)
	hp.Store(h)
	c, err := h.Call(callCtx(t, 30*time.Second), "relay", frame.MustPayload(map[string]any{"tool": "bounce"}))
	require.NoError(t, err)
	_, err = c.Wait()
	var ce *frame.Error
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, ce.Message, "call depth 5 is over the host's limit of 4")
	assert.EqualValues(t, 2, runs.Load(), "bounce ran at depths 1 and 3")
	evs := events(c)
	assert.Equal(t, c.ID(), evs[len(evs)-1].Call)
}

// Cancelling the parent cancels its nested call, running on the other
// child of the pool, at once.
func TestCallParentCancelReachesOtherChild(t *testing.T) {
	cfg := callingConfig(Calls{Tools: []string{"sleep"}})
	cfg.PoolSize = 2
	h, _ := testHost(t, cfg, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := h.Call(ctx, "relay", frame.MustPayload(map[string]any{"tool": "sleep", "args": map[string]any{"ms": 60000}}))
	require.NoError(t, err)
	var parentChild, stepChild string
	var stepID string
	for e := range c.Events() {
		if e.Kind == calllog.KindRequest && e.Call == c.ID() {
			parentChild = e.Child
		}
		if e.Kind == calllog.KindRequest && e.Tool == "sleep" {
			stepChild, stepID = e.Child, e.Call
			break
		}
	}
	require.NotEmpty(t, stepID)
	assert.NotEqual(t, parentChild, stepChild, "the nested call ran on the other child")
	start := time.Now()
	cancel()
	_, err = c.Wait()
	require.Error(t, err)
	evs := events(c)
	end := stepEnd(t, evs, c.ID(), "sleep")
	assert.Equal(t, calllog.KindCancelled, end.Kind)
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.Equal(t, c.ID(), evs[len(evs)-1].Call, "the parent ends after its step")
}

// The parent's deadline bounds its nested call: both end soon after it.
func TestCallParentTimeout(t *testing.T) {
	h, _ := testHost(t, callingConfig(Calls{Tools: []string{"sleep"}}), time.Minute)
	start := time.Now()
	c, err := h.Call(callCtx(t, 700*time.Millisecond), "relay", frame.MustPayload(map[string]any{"tool": "sleep", "args": map[string]any{"ms": 60000}}))
	require.NoError(t, err)
	_, err = c.Wait()
	var ce *frame.Error
	require.ErrorAs(t, err, &ce)
	assert.Less(t, time.Since(start), 5*time.Second)
	end := stepEnd(t, events(c), c.ID(), "sleep")
	assert.True(t, end.Kind == calllog.KindFailed || end.Kind == calllog.KindCancelled, "step ended %s", end.Kind)
}

// The child running a nested call is killed with SIGKILL: the nested call
// fails unreachable, and the handler that made it gets that failure.
func TestCallCalleeKilled(t *testing.T) {
	cfg := callingConfig(Calls{Tools: []string{"sleep"}})
	cfg.PoolSize = 2
	h, _ := testHost(t, cfg, time.Minute)
	c, err := h.Call(callCtx(t, 30*time.Second), "relay", frame.MustPayload(map[string]any{"tool": "sleep", "args": map[string]any{"ms": 60000}}))
	require.NoError(t, err)
	var stepChild string
	for e := range c.Events() {
		if e.Kind == calllog.KindRequest && e.Tool == "sleep" {
			stepChild = e.Child
			break
		}
	}
	i := slices.IndexFunc(h.Children(), func(ci ChildInfo) bool { return ci.ID == stepChild })
	require.GreaterOrEqual(t, i, 0)
	require.NoError(t, syscall.Kill(h.Children()[i].PID, syscall.SIGKILL))
	_, err = c.Wait()
	var ce *frame.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, frame.CodeUnreachable, ce.Code)
	end := stepEnd(t, events(c), c.ID(), "sleep")
	assert.Equal(t, calllog.KindFailed, end.Kind)
	assert.Equal(t, frame.CodeUnreachable, end.Error.Code)
}

// A handler that returns with its nested call still running: the call is
// cancelled, its end logged, and the handler's end comes after it.
func TestCallLeftRunning(t *testing.T) {
	h, _ := testHost(t, callingConfig(Calls{Tools: []string{"sleep"}}), time.Minute)
	start := time.Now()
	c, err := h.Call(callCtx(t, 30*time.Second), "relay", frame.MustPayload(map[string]any{"tool": "sleep", "leave": true, "args": map[string]any{"ms": 60000}}))
	require.NoError(t, err)
	_, err = c.Wait()
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 5*time.Second)
	evs := events(c)
	end := stepEnd(t, evs, c.ID(), "sleep")
	assert.Equal(t, calllog.KindCancelled, end.Kind)
	assert.Equal(t, c.ID(), evs[len(evs)-1].Call)
	assert.Equal(t, calllog.KindCompleted, evs[len(evs)-1].Kind)
}

// refusingStore is an in-memory journal store that fails, as unusable,
// every batch holding the start of a call of tool.
type refusingStore struct {
	eventstore.Memory
	tool string
}

func (s *refusingStore) Keep(ctx context.Context, c calllog.Claim, evs []calllog.Event) error {
	if slices.ContainsFunc(evs, func(e calllog.Event) bool { return e.Kind == calllog.KindStarted && e.Tool == s.tool }) {
		return fmt.Errorf("%w: test store refuses %s", calllog.ErrStoreUnusable, s.tool)
	}
	return s.Memory.Keep(ctx, c, evs)
}

func (s *refusingStore) KeepNew(ctx context.Context, tree, writer string, evs []calllog.Event) (calllog.Claim, error) {
	c, err := s.Claim(ctx, tree, writer)
	if err != nil {
		return c, err
	}
	return c, s.Keep(ctx, c, evs)
}

// A required journal whose store refuses the nested call's start: the
// host tool does not run, and the handler gets the refusal.
func TestCallRequiredJournalRefusesNestedStart(t *testing.T) {
	lt := &lookupTool{}
	cfg := callingConfig(Calls{HostTools: []HostTool{lt.tool()}})
	cfg.CallLog.Journal = &calllog.Journal{Store: &refusingStore{tool: "lookup"}, Required: true, Timeout: 5 * time.Second}
	h, _ := testHost(t, cfg, time.Minute)
	c, err := h.Call(callCtx(t, 30*time.Second), "relay", frame.MustPayload(map[string]any{"tool": "lookup", "args": map[string]any{"word": "fox"}}))
	require.NoError(t, err)
	_, err = c.Wait()
	code, msg := frame.Code(0), ""
	var ce *frame.Error
	var je *calllog.JournalError
	switch {
	case errors.As(err, &ce):
		code, msg = ce.Code, ce.Message
	case errors.As(err, &je): // the parent's end cannot be kept either
		require.NotNil(t, je.Outcome.Error)
		code, msg = je.Outcome.Error.Code, je.Outcome.Error.Message
	default:
		require.FailNow(t, fmt.Sprintf("error %v", err))
	}
	assert.Equal(t, frame.CodeUnreachable, code)
	assert.Contains(t, msg, "journal")
	assert.Zero(t, lt.ran.Load(), "the host tool did not run")
}

// rawCalls is a test's own call connection to a child's call socket: it
// plays a child that does not check anything itself.
type rawCalls struct {
	t  *testing.T
	nc net.Conn
	r  *packetio.Reader
	w  func(wire.Packet) error
}

func dialCalls(t *testing.T, h *Host) *rawCalls {
	t.Helper()
	h.mu.Lock()
	ch := h.slots[0].cur
	h.mu.Unlock()
	require.NotNil(t, ch)
	require.NotNil(t, ch.calls, "the host offers calls")
	nc, err := net.Dial("unix", ch.calls.offer.Socket)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawCalls{t: t, nc: nc, r: packetio.NewReader(nc, packetio.DefaultLimits()), w: func(p wire.Packet) error { return packetio.WritePacket(nc, p, packetio.DefaultLimits()) }}
}

func (c *rawCalls) send(ps ...wire.Packet) {
	c.t.Helper()
	for _, p := range ps {
		require.NoError(c.t, c.w(p))
	}
}

// invoke writes an invoke and the caller's started and completed.
func (c *rawCalls) invoke(id, tool, parent string, args map[string]any) {
	c.t.Helper()
	st, _ := frame.NewStarted(id, frame.CallerToProvider)
	done, _ := frame.NewCompleted(id, frame.CallerToProvider, 1, nil)
	c.send(&wire.Invoke{CallID: id, ToolID: tool, Parent: parent, Arguments: frame.MustPayload(args)},
		&wire.Frame{Frame: st}, &wire.Frame{Frame: done})
}

// answer reads provider frames up to the terminal and the end.
func (c *rawCalls) answer(id string) (chunks int, term frame.Frame) {
	c.t.Helper()
	for {
		p, err := c.r.ReadPacket()
		require.NoError(c.t, err)
		f, ok := p.(*wire.Frame)
		require.True(c.t, ok, "got %s", packetio.TypeOf(p))
		require.Equal(c.t, id, f.CallID)
		if f.Kind.IsTerminal() {
			term = f.Frame
			break
		}
		chunks++
	}
	p, err := c.r.ReadPacket()
	require.NoError(c.t, err)
	require.Equal(c.t, &wire.End{CallID: id}, p)
	return chunks, term
}

// runningSleep starts sleep on the child and returns its call once the
// child runs it (as a step of a program when step is set).
func runningSleep(t *testing.T, h *Host, ctx context.Context) *Call {
	t.Helper()
	c, err := h.Call(ctx, "sleep", frame.MustPayload(map[string]any{"ms": 60000}))
	require.NoError(t, err)
	t.Cleanup(func() { c.Cancel(); c.Wait() })
	return c
}

// A child that checks nothing itself: the host refuses what it must, each
// refusal a failed with end on a connection that stays usable, and a
// malformed call fails that call only.
func TestCallSocketRefusals(t *testing.T) {
	block := make(chan struct{})
	hold := HostTool{Tool: wire.Tool{ID: "hold"}, Run: func(ctx context.Context, c *ToolCall) (frame.Payload, error) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-block:
		}
		return nil, nil
	}}
	lt := &lookupTool{}
	h, _ := testHost(t, callingConfig(Calls{HostTools: []HostTool{lt.tool(), hold}, Tools: []string{"echo"}, MaxDepth: 1, MaxInFlight: 1}), time.Minute)
	defer close(block)
	parent := runningSleep(t, h, callCtx(t, 30*time.Second))
	rc := dialCalls(t, h)

	refusals := []struct {
		name, tool, parent string
		args               map[string]any
		code               frame.Code
		msg                string
	}{
		{"not offered", "count", parent.ID(), map[string]any{}, frame.CodeInvalidFrame, "tool not offered"},
		{"no parent", "lookup", "", map[string]any{"word": "a"}, frame.CodeInvalidFrame, "parent is not a call"},
		{"unknown parent", "lookup", "nobody", map[string]any{"word": "a"}, frame.CodeInvalidFrame, "parent is not a call"},
		{"schema", "lookup", parent.ID(), map[string]any{"word": 1}, frame.CodeInvalidFrame, "arguments"},
	}
	for i, r := range refusals {
		id := fmt.Sprintf("r%d", i)
		rc.invoke(id, r.tool, r.parent, r.args)
		n, term := rc.answer(id)
		assert.Zero(t, n, r.name)
		require.Equal(t, frame.KindFailed, term.Kind, r.name)
		assert.Equal(t, r.code, term.Error.Code, r.name)
		assert.Contains(t, term.Error.Message, r.msg, r.name)
		assert.EqualValues(t, 1, term.Sequence, r.name)
	}
	assert.Zero(t, lt.ran.Load(), "no refused call ran")

	// The same connection then carries a call that runs.
	rc.invoke("ok", "lookup", parent.ID(), map[string]any{"word": "fox"})
	n, term := rc.answer("ok")
	assert.Equal(t, 1, n)
	assert.Equal(t, frame.KindCompleted, term.Kind)

	// One call in flight: a second is refused.
	rc2 := dialCalls(t, h)
	st, _ := frame.NewStarted("h1", frame.CallerToProvider)
	rc2.send(&wire.Invoke{CallID: "h1", ToolID: "hold", Parent: parent.ID(), Arguments: frame.MustPayload(map[string]any{})}, &wire.Frame{Frame: st})
	require.Eventually(t, func() bool {
		h.mu.Lock()
		ch := h.slots[0].cur
		h.mu.Unlock()
		ch.calls.mu.Lock()
		defer ch.calls.mu.Unlock()
		return ch.calls.inFlight == 1
	}, 10*time.Second, 10*time.Millisecond)
	rc.invoke("busy", "lookup", parent.ID(), map[string]any{"word": "a"})
	_, term = rc.answer("busy")
	assert.Contains(t, term.Error.Message, "too many calls")

	// A malformed caller frame (a gap in the fence) fails that call only.
	gap, _ := frame.NewChunk("h1", frame.CallerToProvider, 5, frame.MustPayload(map[string]any{}), nil)
	rc2.send(&wire.Frame{Frame: gap})
	_, term = rc2.answer("h1")
	assert.Equal(t, frame.CodeInvalidFrame, term.Error.Code)
	_, err := rc2.r.ReadPacket()
	assert.Error(t, err, "the connection is closed")

	// The depth limit (1): a call made from a step (depth 1) is refused.
	err = h.Program(callCtx(t, 30*time.Second), "prog", func(ctx context.Context) error {
		step := runningSleep(t, h, ctx)
		rc.invoke("deep", "lookup", step.ID(), map[string]any{"word": "a"})
		_, term := rc.answer("deep")
		assert.Contains(t, term.Error.Message, "call depth 2 is over the limit of 1")
		step.Cancel()
		step.Wait()
		return nil
	})
	require.NoError(t, err)

	// The parent and the host are unharmed.
	assert.False(t, parent.providerDone.Load())
	c, err := h.Call(callCtx(t, 30*time.Second), "echo", nil, WithInput())
	require.NoError(t, err)
	_, err = c.Wait()
	require.NoError(t, err)
}

// The child whose handler made a nested call is killed with SIGKILL: its
// call fails unreachable, and the nested call, running on the other
// child, is cancelled rather than left running.
func TestCallCallerKilled(t *testing.T) {
	cfg := callingConfig(Calls{Tools: []string{"sleep"}})
	cfg.PoolSize = 2
	h, _ := testHost(t, cfg, time.Minute)
	c, err := h.Call(callCtx(t, 30*time.Second), "relay", frame.MustPayload(map[string]any{"tool": "sleep", "args": map[string]any{"ms": 60000}}))
	require.NoError(t, err)
	var parentChild, stepChild string
	for e := range c.Events() {
		if e.Kind == calllog.KindRequest && e.Call == c.ID() {
			parentChild = e.Child
		}
		if e.Kind == calllog.KindRequest && e.Tool == "sleep" {
			stepChild = e.Child
			break
		}
	}
	require.NotEqual(t, parentChild, stepChild)
	i := slices.IndexFunc(h.Children(), func(ci ChildInfo) bool { return ci.ID == parentChild })
	require.GreaterOrEqual(t, i, 0)
	start := time.Now()
	require.NoError(t, syscall.Kill(h.Children()[i].PID, syscall.SIGKILL))
	_, err = c.Wait()
	var ce *frame.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, frame.CodeUnreachable, ce.Code)
	assert.True(t, ce.Synthetic)
	evs := events(c)
	end := stepEnd(t, evs, c.ID(), "sleep")
	assert.Equal(t, calllog.KindCancelled, end.Kind)
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.Equal(t, c.ID(), evs[len(evs)-1].Call, "the parent ends after its step")
}

// A detached call whose caller already closed its direction is cancelled
// when the calling child dies (docs/protocol.md §8 item 7), even though the
// host no longer reads its call connection; the child's stop does not wait
// for the callee to end on its own.
func TestCallDetachedCancelledWhenCallerDies(t *testing.T) {
	h, _, _, cancelled := holdDetached(t)
	pid := h.Children()[0].PID
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the detached callee was not cancelled when its caller died")
	}
}

// A caller that closed its direction and then closes its call connection
// (a cancel after CloseSend, or a caller gone) cancels the callee at once:
// the host reads the connection in the quiet interval too.
func TestCallConnClosedAfterCallerCompleted(t *testing.T) {
	_, rc, parent, cancelled := holdDetached(t)
	require.NoError(t, rc.nc.Close())
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the callee was not cancelled when its caller closed the connection")
	}
	assert.False(t, parent.providerDone.Load(), "the parent is unharmed")
}

// holdDetached starts a host whose host tool "hold" runs until its
// context ends (or the test does), and has a running call's child call
// it detached, its caller direction closed at once (invoke, started,
// completed on a call connection, rc). It returns once hold runs, with
// the parent call; cancelled is closed when hold's context ends.
func holdDetached(t *testing.T) (h *Host, rc *rawCalls, parent *Call, cancelled <-chan struct{}) {
	t.Helper()
	block := make(chan struct{})
	running := make(chan struct{})
	ended := make(chan struct{})
	hold := HostTool{Tool: wire.Tool{ID: "hold"}, Run: func(ctx context.Context, c *ToolCall) (frame.Payload, error) {
		close(running)
		select {
		case <-ctx.Done():
			close(ended)
			return nil, ctx.Err()
		case <-block:
		}
		return nil, nil
	}}
	h, _ = testHost(t, callingConfig(Calls{HostTools: []HostTool{hold}}), time.Minute)
	t.Cleanup(func() { close(block) }) // before the host's Close: cleanups run last first
	parent = runningSleep(t, h, callCtx(t, 30*time.Second))
	rc = dialCalls(t, h)
	st, _ := frame.NewStarted("d1", frame.CallerToProvider)
	done, _ := frame.NewCompleted("d1", frame.CallerToProvider, 1, nil)
	rc.send(&wire.Invoke{CallID: "d1", ToolID: "hold", Parent: parent.ID(), Detached: true, Arguments: frame.MustPayload(map[string]any{})},
		&wire.Frame{Frame: st}, &wire.Frame{Frame: done})
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the host tool did not start")
	}
	return h, rc, parent, ended
}

// A child that opens call connections beyond twice max_in_flight has the
// one more wait, unserved, until one of them closes: its connections
// cannot make the host hold unbounded goroutines, buffers and fds.
func TestCallSocketConnectionBound(t *testing.T) {
	h, _ := testHost(t, callingConfig(Calls{Tools: []string{"echo"}, MaxInFlight: 1}), time.Minute)
	parent := runningSleep(t, h, callCtx(t, 30*time.Second))
	kept := []*rawCalls{dialCalls(t, h), dialCalls(t, h)}
	h.mu.Lock()
	ch := h.slots[0].cur
	h.mu.Unlock()
	require.Eventually(t, func() bool {
		ch.calls.mu.Lock()
		defer ch.calls.mu.Unlock()
		return len(ch.calls.conns) == 2
	}, 10*time.Second, 10*time.Millisecond)
	extra := dialCalls(t, h)
	extra.invoke("e1", "echo", parent.ID(), map[string]any{})
	extra.nc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err := extra.r.ReadPacket()
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "the connection past the bound is not served")
	ch.calls.mu.Lock()
	assert.Len(t, ch.calls.conns, 2)
	ch.calls.mu.Unlock()
	// Once one closes, the waiting one is served.
	kept[0].nc.Close()
	extra.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, term := extra.answer("e1")
	assert.Equal(t, frame.KindCompleted, term.Kind)
}

// Calls whose whole input went with the invoke (relay's "input", which
// makes the call with child.WithInput): a host tool gets every chunk,
// checked against its input schema, and a pool child's tool streams its
// answer to each; a chunk that breaks the host tool's input schema is
// refused and the tool does not run. Each call runs on the connection's
// own goroutine (callServer.serveConn): the host tool runs on the same
// goroutine every time, no goroutine started for the call, and the
// connection is reused (the host serves one call connection throughout).
func TestCallWholeInput(t *testing.T) {
	var ran atomic.Int32
	var runMu sync.Mutex
	var runOn []string // the goroutine each run of sum ran on, and whether it serves a connection
	sum := HostTool{
		Tool: wire.Tool{ID: "sum", InputSchema: map[string]any{"type": "object", "required": []any{"n"},
			"properties": map[string]any{"n": map[string]any{"type": "integer"}}}},
		Run: func(ctx context.Context, c *ToolCall) (frame.Payload, error) {
			ran.Add(1)
			buf := make([]byte, 64<<10)
			stack := string(buf[:runtime.Stack(buf, false)])
			g, _, _ := strings.Cut(stack, " [") // "goroutine N"
			runMu.Lock()
			runOn = append(runOn, fmt.Sprintf("%s serveConn=%t", g, strings.Contains(stack, "(*callServer).serveConn(")))
			runMu.Unlock()
			total, chunks := 0, 0
			for f := range c.InputFrames() {
				var p struct {
					N int `json:"n"`
				}
				if err := f.Payload.Decode(&p); err != nil {
					return nil, err
				}
				total += p.N
				chunks++
			}
			return frame.MustPayload(map[string]any{"sum": total, "chunks": chunks}), nil
		},
	}
	h, _ := testHost(t, callingConfig(Calls{HostTools: []HostTool{sum}, Tools: []string{"upper"}}), time.Minute)
	relay := func(args map[string]any) (frame.Payload, []string, error) {
		c, err := h.Call(callCtx(t, 30*time.Second), "relay", frame.MustPayload(args), WithInput())
		require.NoError(t, err)
		var chunks []string
		for f, err := range c.Frames() {
			if err == nil && f.Kind == frame.KindChunk {
				var p map[string]any
				require.NoError(t, f.Payload.Decode(&p))
				chunks = append(chunks, fmt.Sprint(p["text"]))
			}
		}
		res, err := c.Wait()
		return res, chunks, err
	}
	// The call connections the host served: the same one each time.
	served := map[net.Conn]bool{}
	for range 3 {
		res, _, err := relay(map[string]any{"tool": "sum", "input": []any{map[string]any{"n": 2}, map[string]any{"n": 5}}})
		require.NoError(t, err)
		var got map[string]any
		require.NoError(t, res.Decode(&got))
		assert.EqualValues(t, 7, got["sum"])
		assert.EqualValues(t, 2, got["chunks"])
		h.mu.Lock()
		for _, s := range h.slots {
			if s.cur != nil && s.cur.calls != nil {
				s.cur.calls.mu.Lock()
				for nc := range s.cur.calls.conns {
					served[nc] = true
				}
				s.cur.calls.mu.Unlock()
			}
		}
		h.mu.Unlock()
	}
	assert.Len(t, served, 1, "the idle call connection is reused")
	runMu.Lock()
	require.Len(t, runOn, 3)
	assert.Contains(t, runOn[0], "serveConn=true", "the host tool runs on the connection's goroutine")
	assert.Equal(t, []string{runOn[0], runOn[0], runOn[0]}, runOn, "one goroutine, the connection's, ran every call")
	runMu.Unlock()
	res, _, err := relay(map[string]any{"tool": "sum", "input": []any{}})
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, res.Decode(&got))
	assert.EqualValues(t, 0, got["chunks"], "no input: the completed alone")

	_, chunks, err := relay(map[string]any{"tool": "upper", "input": []any{map[string]any{"text": "ab"}, map[string]any{"text": "cd"}}})
	require.NoError(t, err)
	assert.Equal(t, []string{"AB", "CD"}, chunks)

	before := ran.Load()
	_, _, err = relay(map[string]any{"tool": "sum", "input": []any{map[string]any{"n": "x"}}})
	var ce *frame.Error
	require.ErrorAs(t, err, &ce, "the SDK refuses the chunk (ErrArguments), nothing sent")
	assert.Equal(t, before, ran.Load(), "a refused call does not run")
}
