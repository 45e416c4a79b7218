package host

import (
	"context"
	"testing"
	"time"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cancelBound is how soon a caller's cancel must reach its callee's
// handler: a cancel that is lost is seen only when the callee ends by
// itself, and a loaded 2-core machine under -race needs a margin.
const cancelBound = 3 * time.Second

// inputTool is a host tool that reads k chunks of its input (none for 0,
// and then no more), and records when its ctx ended.
type inputTool struct {
	id      string
	k       int // chunks read before took is closed; -1: read all
	started chan *ToolCall
	took    chan struct{} // closed once k chunks were read
	ended   chan time.Time
}

func newInputTool(id string, k int) *inputTool {
	return &inputTool{id: id, k: k, started: make(chan *ToolCall, 1), took: make(chan struct{}), ended: make(chan time.Time, 1)}
}

func (it *inputTool) tool() HostTool {
	return HostTool{Tool: wire.Tool{ID: it.id}, Run: func(ctx context.Context, c *ToolCall) (frame.Payload, error) {
		it.started <- c
		n := 0
		if it.k == 0 {
			close(it.took)
		} else {
			for range c.InputFrames() {
				if n++; n == it.k {
					close(it.took)
				}
			}
		}
		<-ctx.Done()
		it.ended <- time.Now()
		return nil, ctx.Err()
	}}
}

// A handler cancels its call through the host while the callee takes no
// input, or mid-input: the callee's handler sees the cancel within
// cancelBound, whether the caller's cancel is a cancelled frame waiting
// behind chunks the host has not read, or a closed connection (the
// caller's send was blocked). relay feeds the callee and cancels it when
// its own caller sends a chunk.
func TestCallCallerCancelReachesCallee(t *testing.T) {
	cases := []struct {
		name string
		k    int   // chunks the callee reads; 0: none
		feed int64 // chunks relay sends
		full bool  // wait for the callee's input queue to fill
		wait time.Duration
	}{
		// 8 in the host's queue, one blocked in its send, the rest and
		// the cancelled frame unread in the socket: the caller's sends
		// all returned, so it writes cancelled and shuts down its side.
		{name: "no input, cancel behind unread chunks", feed: 20, full: true},
		// The caller's send itself blocks: its cancel closes the
		// connection.
		{name: "no input, caller's send blocked", feed: 1_000_000, full: true, wait: 300 * time.Millisecond},
		// The callee reads as the caller sends.
		{name: "mid-input", k: 3, feed: 10_000_000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			it := newInputTool("take", tc.k)
			c, obs := startRelay(t, it, map[string]any{"tool": "take", "feed": tc.feed, "cancel_on_input": true})
			var callee *ToolCall
			select {
			case callee = <-it.started:
			case <-time.After(20 * time.Second):
				require.FailNow(t, "the host tool did not start")
			}
			<-it.took
			if tc.full {
				require.Eventually(t, func() bool { return len(callee.in) == cap(callee.in) }, 20*time.Second, 5*time.Millisecond)
			}
			time.Sleep(tc.wait)
			cancelReachesCallee(t, c, it, obs)
		})
	}
}

// startRelay starts relay with args on a host whose one host tool is it,
// with an observer of the ends of its calls.
func startRelay(t *testing.T, it *inputTool, args map[string]any) (*Call, *stepEnds) {
	t.Helper()
	h, _ := testHost(t, callingConfig(Calls{HostTools: []HostTool{it.tool()}}), time.Minute)
	obs := &stepEnds{tool: it.id, ends: make(chan calllog.Event, 1)}
	c, err := h.Call(callCtx(t, 30*time.Second), "relay", frame.MustPayload(args), WithObservers(obs))
	require.NoError(t, err)
	return c, obs
}

// cancelReachesCallee sends relay (c, started with cancel_on_input) the
// chunk on which it cancels its callee it, and requires that the callee
// sees the cancel within cancelBound, that relay ends with its callee's
// error, and that the callee's call ends cancelled, relay's child.
func cancelReachesCallee(t *testing.T, c *Call, it *inputTool, obs *stepEnds) {
	t.Helper()
	start := time.Now()
	require.NoError(t, c.Send(callCtx(t, 10*time.Second), frame.MustPayload(map[string]any{"cancel": true}), nil))
	select {
	case at := <-it.ended:
		assert.Less(t, at.Sub(start), cancelBound, "the callee saw the cancel")
	case <-time.After(20 * time.Second):
		require.FailNow(t, "the caller's cancel did not reach the callee")
	}
	c.CloseSend()
	_, err := c.Wait()
	var ce *frame.Error
	require.ErrorAs(t, err, &ce, "relay ends with its callee's cancel")
	end := <-obs.ends
	assert.Equal(t, c.ID(), end.Parent)
	assert.Equal(t, calllog.KindCancelled, end.Kind)
}

// stepEnds is an observer that passes on the end events of tool's calls.
type stepEnds struct {
	tool string
	ends chan calllog.Event // at most one end is expected; more are dropped
}

func (o *stepEnds) WantsKind(k calllog.Kind) bool { return k.IsEnd() }

func (o *stepEnds) Observe(_ context.Context, e calllog.Event) error {
	if e.Tool == o.tool && e.Kind.IsEnd() {
		select {
		case o.ends <- e:
		default:
		}
	}
	return nil
}

// The same with a child's tool as the callee: sleep, on the other child,
// reads no input, so the host's send to it blocks; relay's cancel ends
// it within cancelBound. (The step's input outgrows the call's history,
// so its end is taken from an observer.)
func TestCallCallerCancelReachesChildCallee(t *testing.T) {
	cfg := callingConfig(Calls{Tools: []string{"sleep"}})
	cfg.PoolSize = 2
	h, _ := testHost(t, cfg, time.Minute)
	obs := &stepEnds{tool: "sleep", ends: make(chan calllog.Event, 1)}
	c, err := h.Call(callCtx(t, 30*time.Second), "relay",
		frame.MustPayload(map[string]any{"tool": "sleep", "args": map[string]any{"ms": 60000}, "feed": 1_000_000, "cancel_on_input": true}),
		WithObservers(obs))
	require.NoError(t, err)
	var stepID string
	for e := range c.Events() {
		if e.Kind == calllog.KindRequest && e.Tool == "sleep" {
			stepID = e.Call
			break
		}
	}
	require.NotEmpty(t, stepID)
	// Let the feed fill the child's ingress queue and both sockets.
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	require.NoError(t, c.Send(callCtx(t, 10*time.Second), frame.MustPayload(map[string]any{"cancel": true}), nil))
	select {
	case end := <-obs.ends:
		assert.Equal(t, stepID, end.Call)
		assert.Equal(t, c.ID(), end.Parent)
		assert.Equal(t, calllog.KindCancelled, end.Kind)
		assert.Less(t, end.At.Sub(start), cancelBound, "the callee ended within the bound")
	case <-time.After(20 * time.Second):
		require.FailNow(t, "the caller's cancel did not reach the callee")
	}
	c.CloseSend()
	_, err = c.Wait()
	var ce *frame.Error
	require.ErrorAs(t, err, &ce)
}

// A caller that closes its call connection while the host holds its
// chunks for a callee that takes none, and the host reads no more (a
// child that died mid-input): the callee is cancelled within
// cancelBound, and the parent is unharmed.
func TestCallConnClosedMidInput(t *testing.T) {
	it := newInputTool("take", 0)
	h, _ := testHost(t, callingConfig(Calls{HostTools: []HostTool{it.tool()}}), time.Minute)
	parent := runningSleep(t, h, callCtx(t, 30*time.Second))
	rc := dialCalls(t, h)
	st, _ := frame.NewStarted("m1", frame.CallerToProvider)
	rc.send(&wire.Invoke{CallID: "m1", ToolID: "take", Parent: parent.ID(), Arguments: frame.MustPayload(map[string]any{})},
		&wire.Frame{Frame: st})
	var callee *ToolCall
	select {
	case callee = <-it.started:
	case <-time.After(20 * time.Second):
		require.FailNow(t, "the host tool did not start")
	}
	for i := uint64(1); i <= 20; i++ {
		f, err := frame.NewChunk("m1", frame.CallerToProvider, i, frame.MustPayload(map[string]any{"i": i}), nil)
		require.NoError(t, err)
		rc.send(&wire.Frame{Frame: f})
	}
	require.Eventually(t, func() bool { return len(callee.in) == cap(callee.in) }, 20*time.Second, 5*time.Millisecond)
	start := time.Now()
	require.NoError(t, rc.nc.Close())
	select {
	case at := <-it.ended:
		assert.Less(t, at.Sub(start), cancelBound)
	case <-time.After(20 * time.Second):
		require.FailNow(t, "the closed connection did not cancel the callee")
	}
	assert.False(t, parent.providerDone.Load(), "the parent is unharmed")
}

// A detached call outlives its parent, so the host gives it a deadline:
// Calls.DetachedTimeout when it asks for none, and at most that when it
// asks for more. The callee sees that deadline and the call fails
// timeout once it passed.
func TestCallDetachedCeiling(t *testing.T) {
	const ceiling = 400 * time.Millisecond
	for _, tc := range []struct {
		name      string
		timeoutMS int64
		want      time.Duration
	}{
		{"no timeout_ms", 0, ceiling},
		{"timeout_ms over the ceiling", 60_000, ceiling},
		{"timeout_ms under the ceiling", 200, 200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			deadlines := make(chan time.Duration, 1)
			wait := HostTool{Tool: wire.Tool{ID: "wait"}, Run: func(ctx context.Context, c *ToolCall) (frame.Payload, error) {
				dl, ok := ctx.Deadline()
				if !ok {
					deadlines <- -1
					return nil, nil
				}
				deadlines <- time.Until(dl)
				<-ctx.Done()
				return nil, ctx.Err()
			}}
			h, _ := testHost(t, callingConfig(Calls{HostTools: []HostTool{wait}, DetachedTimeout: ceiling}), time.Minute)
			parent := runningSleep(t, h, callCtx(t, 30*time.Second))
			rc := dialCalls(t, h)
			st, _ := frame.NewStarted("d1", frame.CallerToProvider)
			done, _ := frame.NewCompleted("d1", frame.CallerToProvider, 1, nil)
			rc.send(&wire.Invoke{CallID: "d1", ToolID: "wait", Parent: parent.ID(), Detached: true, TimeoutMS: tc.timeoutMS,
				Arguments: frame.MustPayload(map[string]any{})}, &wire.Frame{Frame: st}, &wire.Frame{Frame: done})
			left := <-deadlines
			assert.Greater(t, left, time.Duration(0), "the callee has a deadline")
			assert.LessOrEqual(t, left, tc.want)
			_, term := rc.answer("d1")
			require.Equal(t, frame.KindFailed, term.Kind)
			assert.Equal(t, frame.CodeTimeout, term.Error.Code)
			assert.False(t, parent.providerDone.Load(), "the parent is unharmed")
		})
	}
}

// A negative Calls.DetachedTimeout is refused, naming the field.
func TestCallDetachedTimeoutValidated(t *testing.T) {
	cfg := callingConfig(Calls{Tools: []string{"echo"}, DetachedTimeout: -time.Second})
	err := cfg.validate()
	require.ErrorIs(t, err, ErrConfig)
	assert.Contains(t, err.Error(), "Calls.DetachedTimeout")
}

// A call whose whole input went with its invoke (child.WithInput, relay's
// "input") runs on its call connection's goroutine: a host tool reads
// every chunk, and then the caller's cancel (its SDK closes the call
// connection, the input being closed already) reaches the callee within
// cancelBound through the hang-up watch, armed once the call has run
// hangupWatchDelay.
func TestCallWholeInputCancelReachesCallee(t *testing.T) {
	it := newInputTool("take", 2)
	c, obs := startRelay(t, it, map[string]any{"tool": "take", "input": []any{map[string]any{"i": 0}, map[string]any{"i": 1}}, "cancel_on_input": true})
	select {
	case <-it.took:
	case <-time.After(20 * time.Second):
		require.FailNow(t, "the host tool did not get its two chunks")
	}
	time.Sleep(50 * time.Millisecond) // well past hangupWatchDelay: the watch is armed
	cancelReachesCallee(t, c, it, obs)
}
