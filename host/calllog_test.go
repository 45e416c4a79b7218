package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/eventstore"
	"github.com/skulkrt/skulk/internal/recorder"
	"github.com/skulkrt/skulk/wire"
)

// invokeLog makes the fake child report every invoke it reads into a file
// and returns a function reading the lines so far.
func invokeLog(t *testing.T, cfg *Config) func() []string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "invokes")
	cfg.ExtraEnv = append(cfg.ExtraEnv, fakeInvokesEnv+"="+path)
	return func() []string {
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		for i, l := range lines {
			lines[i] = strings.TrimRight(l, " ")
		}
		return lines
	}
}

// invoked reports whether the fake child read an invoke of call id.
func invoked(lines []string, id string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, id+" ") {
			return true
		}
	}
	return false
}

// okCall reads the started frame of an "ok" call, echoes text through it,
// half-closes and waits for its result.
func okCall(t *testing.T, c *Call, text string) {
	t.Helper()
	if f, err := c.Recv(callCtx(t, 10*time.Second)); err != nil || f.Kind != frame.KindStarted {
		require.FailNow(t, fmt.Sprintf("Recv: %v %v", f.Kind, err))
	}
	okRoundTrip(t, c, text)
	require.NoError(t, c.CloseSend())
	if _, err := c.Wait(); err != nil {
		require.FailNow(t, fmt.Sprintf("Wait: %v", err))
	}
}

// recordedHost starts a test host (testHost, cfg) whose Config.CallLog is
// opts; the host's Close, at the end of the test, stops its observers and
// journal writers before testHost checks for leaked goroutines.
func recordedHost(t *testing.T, cfg Config, opts calllog.Options) *Host {
	t.Helper()
	cfg.CallLog = opts
	h, _ := testHost(t, cfg, time.Minute)
	return h
}

// collector is an observer keeping what it is given.
type collector struct {
	mu     sync.Mutex
	events []calllog.Event
}

func (c *collector) Observe(_ context.Context, e calllog.Event) error {
	c.mu.Lock()
	c.events = append(c.events, e)
	c.mu.Unlock()
	return nil
}

func (c *collector) got() []calllog.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.events)
}

func kinds(evs []calllog.Event) string {
	var b []string
	for _, e := range evs {
		k := e.Kind.String()
		if e.Kind == calllog.KindInput || e.Kind == calllog.KindOutput {
			k += "(" + e.FrameKind.String() + ")"
		}
		b = append(b, k)
	}
	return strings.Join(b, " ")
}

func TestCallEventsOrder(t *testing.T) {
	h, _ := testHost(t, fakeConfig("serve"), time.Minute)
	ctx := callCtx(t, 10*time.Second)
	c, err := h.Call(ctx, "ok", frame.MustPayload(map[string]any{"prefix": "a"}))
	require.NoError(t, err)
	okCall(t, c, "hello")
	var evs []calllog.Event
	for e := range c.Events() {
		evs = append(evs, e)
	}
	want := "started request input(started) input(chunk) output(chunk) input(completed) done"
	if got := kinds(evs); got != want {
		require.FailNow(t, fmt.Sprintf("events:\n got %s\nwant %s", got, want))
	}
	for i, e := range evs {
		require.Falsef(t, e.Tree != c.ID() || e.Call != c.ID() || e.Tool != "ok" || e.Seq != uint64(i+1), "event %d: %+v", i, e)
		require.Falsef(t, i > 0 && (e.After != evs[i-1].Seq || e.ToolVersion != "ok-v1"), "event %d: after %d version %q", i, e.After, e.ToolVersion)
	}
	if evs[1].Child == "" || evs[1].Attempt != 1 {
		require.FailNow(t, fmt.Sprintf("request: %+v", evs[1]))
	}
	var text strings.Builder
	for _, e := range evs {
		if e.Kind == calllog.KindOutput && e.Payload != nil {
			s, _ := e.Payload.Value.Text()
			text.WriteString(s)
		}
	}
	require.Equal(t, "hello", text.String(), "the output events' text")
	v, err := c.Wait()
	require.Falsef(t, err != nil || v == nil, "Result: %v %v", v, err)
}

// TestRefusedOverMaxHeader: an invoke, or a chunk sent with it, larger
// than the child's max_header is refused before anything reaches the
// child: an error matching wire.ErrTooLarge, a "limits" refusal in the
// log, no invoke seen by the child, no slot held, and the next call served
// as usual. Just under the limit is not refused.
func TestRefusedOverMaxHeader(t *testing.T) {
	obs := &collector{}
	cfg := fakeConfig("serve")
	cfg.Limits = wire.Limits{MaxHeader: 4096}
	invokes := invokeLog(t, &cfg)
	h := recordedHost(t, cfg, calllog.Options{Observers: []calllog.Observer{obs}})
	ctx := callCtx(t, 20*time.Second)
	big := strings.Repeat("x", 5000)
	if _, err := h.Call(ctx, "ok", frame.MustPayload(map[string]any{"prefix": big})); !errors.Is(err, wire.ErrTooLarge) {
		require.FailNow(t, fmt.Sprintf("large arguments: %v", err))
	}
	chunk := frame.MustPayload(map[string]any{"text": big})
	if _, err := h.Call(ctx, "ok", nil, WithInput(chunk)); !errors.Is(err, wire.ErrTooLarge) {
		require.FailNow(t, fmt.Sprintf("large input chunk: %v", err))
	}
	if n := h.Children()[0].Running; n != 0 {
		require.FailNow(t, fmt.Sprintf("a refused call holds a slot"))
	}
	// A chunk over the limit sent on a running call: refused, not logged
	// as sent, and the call goes on.
	sc, err := h.Call(ctx, "ok", nil)
	require.NoError(t, err)
	if err := sc.Send(ctx, chunk, nil); !errors.Is(err, wire.ErrTooLarge) {
		require.FailNow(t, fmt.Sprintf("large chunk sent: %v", err))
	}
	require.NoError(t, sc.Send(ctx, frame.MustPayload(map[string]any{"text": "small"}), nil))
	require.NoError(t, sc.CloseSend())
	if _, err := sc.Wait(); err != nil {
		require.FailNow(t, fmt.Sprintf("the call after a refused chunk: %v", err))
	}
	inputs := 0
	for ev := range sc.Events() {
		if ev.Kind == calllog.KindInput {
			inputs++
		}
	}
	if inputs != 3 { // started, the small chunk, completed
		require.FailNow(t, fmt.Sprintf("%d input events, want 3", inputs))
	}
	// About 3,950 bytes of arguments: over the cheap bound, under the limit.
	near := frame.MustPayload(map[string]any{"prefix": strings.Repeat("y", 3900)})
	c, err := h.Call(ctx, "ok", near, WithInput(frame.MustPayload(map[string]any{"text": "t"})))
	require.NoError(t, err, "a call under the limit")
	if _, err := c.Wait(); err != nil {
		require.FailNow(t, fmt.Sprintf("a call under the limit: %v", err))
	}
	require.NoError(t, h.FlushObservers(ctx))
	evs := obs.got()
	if got, want := kinds(evs)[:len("started failed started failed")], "started failed started failed"; got != want {
		require.FailNow(t, fmt.Sprintf("events %s, want %s first", kinds(evs), want))
	}
	for i := range 2 {
		st, end := evs[2*i], evs[2*i+1]
		require.Falsef(t, end.Refused != "limits" || end.Error == nil || end.Error.Code != frame.CodeInvalidFrame, "refusal %d: %+v", i, end)
		require.Falsef(t, invoked(invokes(), st.Call), "the child was sent refused call %s", st.Call)
		require.Falsef(t, strings.Contains(end.Error.Message, "xxx"), "the refusal echoes the value: %s", end.Error.Message)
	}
}

func TestRefusedCallsAreLogged(t *testing.T) {
	obs := &collector{}
	cfg := fakeConfig("serve")
	cfg.Restart.MaxRestarts = -1
	invokes := invokeLog(t, &cfg)
	h := recordedHost(t, cfg, calllog.Options{Observers: []calllog.Observer{obs}})
	ctx := callCtx(t, 20*time.Second)
	var trees []string // from each *RefusedError
	refused := func(err error) error {
		var re *RefusedError
		if errors.As(err, &re) {
			trees = append(trees, re.Tree)
		}
		return err
	}
	if _, err := h.Call(ctx, "nope", nil); !errors.Is(refused(err), ErrUnknownTool) {
		require.FailNow(t, fmt.Sprintf("unknown tool: %v", err))
	}
	var se *SchemaError
	if _, err := h.Call(ctx, "ok", frame.MustPayload(map[string]any{"n": -1})); !errors.As(refused(err), &se) {
		require.FailNow(t, fmt.Sprintf("schema: %v", err))
	}
	syscall.Kill(readyPID(t, h, 0), syscall.SIGKILL)
	waitFor(t, func() bool { return h.Children()[0].State == "down" })
	if _, err := h.Call(ctx, "ok", nil); !errors.Is(refused(err), ErrPoolDown) {
		require.FailNow(t, fmt.Sprintf("pool down: %v", err))
	}
	require.NoError(t, h.FlushObservers(ctx))
	evs := obs.got()
	if got, want := kinds(evs), "started failed started failed started failed"; got != want {
		require.FailNow(t, fmt.Sprintf("events %s, want %s", got, want))
	}
	for i, class := range []string{"unknown_tool", "schema", "pool_down"} {
		st, end := evs[2*i], evs[2*i+1]
		require.Falsef(t, end.Refused != class || end.Error == nil || end.Call != st.Call || end.Tree != st.Call, "refusal %d: %+v", i, end)
		require.Falsef(t, len(trees) != 3 || trees[i] != end.Tree, "refusal %d: the errors name trees %q, the log %s", i, trees, end.Tree)
		require.Falsef(t, invoked(invokes(), st.Call), "the child was sent refused call %s", st.Call)
	}
	if evs[2].ToolVersion != "ok-v1" || evs[0].ToolVersion != "" {
		require.FailNow(t, fmt.Sprintf("versions %q %q", evs[0].ToolVersion, evs[2].ToolVersion))
	}
}

// flakyStore is an in-memory store whose Keep can be made to fail (failing) or
// to block until released or its ctx ends (holdEnds: batches holding an
// end event).
type flakyStore struct {
	eventstore.Memory
	failing  atomic.Bool
	holdEnds atomic.Bool
	release  chan struct{} // closed to let held sends through
	sends    atomic.Int32
	inFlight atomic.Int32
	overlap  atomic.Bool // two sends at once were seen
}

var errDiskFull = errors.New("test store: disk full")

func (s *flakyStore) Keep(ctx context.Context, c calllog.Claim, evs []calllog.Event) error {
	s.sends.Add(1)
	if s.inFlight.Add(1) > 1 {
		s.overlap.Store(true)
	}
	defer s.inFlight.Add(-1)
	if s.failing.Load() {
		return errDiskFull
	}
	if s.holdEnds.Load() && slices.ContainsFunc(evs, func(e calllog.Event) bool { return e.Kind.IsEnd() }) {
		select {
		case <-s.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.Memory.Keep(ctx, c, evs)
}

func (s *flakyStore) KeepNew(ctx context.Context, tree, writer string, evs []calllog.Event) (calllog.Claim, error) {
	if s.failing.Load() {
		return calllog.Claim{}, errDiskFull
	}
	c, err := s.Claim(ctx, tree, writer)
	if err != nil {
		return c, err
	}
	return c, s.Keep(ctx, c, evs)
}

func (s *flakyStore) Claim(ctx context.Context, tree, writer string) (calllog.Claim, error) {
	if s.failing.Load() {
		return calllog.Claim{}, errDiskFull
	}
	return s.Memory.Claim(ctx, tree, writer)
}

func TestRequiredJournalStartNotKeptNeverInvokes(t *testing.T) {
	st := &flakyStore{release: make(chan struct{})}
	st.failing.Store(true)
	j := &calllog.Journal{Store: st, Required: true, Timeout: 300 * time.Millisecond}
	cfg := fakeConfig("serve")
	invokes := invokeLog(t, &cfg)
	h := recordedHost(t, cfg, calllog.Options{Journal: j})
	ctx := callCtx(t, 20*time.Second)
	obs := &collector{}
	_, err := h.Call(ctx, "ok", nil, WithObservers(obs))
	var je *calllog.JournalError
	require.Falsef(t, !errors.Is(err, calllog.ErrJournalStart) || !errors.As(err, &je), "Call: %v", err)
	if n := h.Children()[0].Running; n != 0 {
		require.FailNow(t, "a refused call holds a slot")
	}
	// The store recovers: a later call goes through, and the child was
	// never sent the refused one.
	st.failing.Store(false)
	c, err := h.Call(ctx, "ok", nil)
	require.NoError(t, err)
	okCall(t, c, "x")
	lines := invokes()
	require.Falsef(t, !invoked(lines, c.ID()) || invoked(lines, je.Call), "invokes the child read: %q (refused %s)", lines, je.Call)
	require.NoError(t, h.FlushObservers(ctx))
	if got := kinds(obs.got()); got != "started failed" || obs.got()[1].Refused != "journal_start" {
		require.FailNow(t, fmt.Sprintf("refused call's events: %s %+v", got, obs.got()))
	}
}

func TestRequiredJournalEndNotConfirmed(t *testing.T) {
	st := &flakyStore{release: make(chan struct{})}
	j := &calllog.Journal{Store: st, Required: true, Timeout: 300 * time.Millisecond}
	cfg := fakeConfig("serve")
	h := recordedHost(t, cfg, calllog.Options{Journal: j})
	ctx := callCtx(t, 20*time.Second)
	st.holdEnds.Store(true)
	c, err := h.Call(ctx, "ok", frame.MustPayload(map[string]any{"prefix": "q"}))
	require.NoError(t, err)
	require.NoError(t, c.CloseSend())
	start := time.Now()
	_, err = c.Wait()
	var je *calllog.JournalError
	require.Falsef(t, !errors.Is(err, calllog.ErrJournalEnd) || !errors.As(err, &je) || !errors.Is(err, recorder.ErrNoAnswer), "Wait: %v", err)
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "what a user matches for a store that did not answer")
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "the call completed: its context did not end it")
	assert.NotErrorIs(t, err, calllog.ErrJournalOverflow)
	if d := time.Since(start); d > 10*time.Second {
		require.FailNow(t, fmt.Sprintf("the end barrier took %v", d))
	}
	var res struct {
		N      int    `json:"n"`
		Prefix string `json:"prefix"`
	}
	require.Falsef(t, je.Outcome.Kind != calllog.KindCompleted || je.Outcome.Result.Decode(&res) != nil || res.Prefix != "q" || je.Call != c.ID(), "outcome %+v", je.Outcome)
	settleCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	if err := settleEnd(settleCtx, err); !errors.Is(err, context.DeadlineExceeded) {
		require.FailNow(t, fmt.Sprintf("JournalError.Kept before the store recovered: %v", err))
	}
	cancel()
	close(st.release)
	require.NoError(t, settleEnd(ctx, err), "JournalError.Kept after recovery")
	require.False(t, st.overlap.Load(), "two sends at once")
	evs, _ := st.EventsAfter(ctx, c.ID(), 0, 100)
	if len(evs) == 0 || evs[len(evs)-1].Kind != calllog.KindCompleted {
		require.FailNow(t, fmt.Sprintf("kept: %s", kinds(evs)))
	}
}

// callLatency returns the median of n sequential small calls.
func callLatency(t *testing.T, h *Host, n int, opts ...CallOption) time.Duration {
	t.Helper()
	ctx := callCtx(t, time.Minute)
	ds := make([]time.Duration, n)
	for i := range n {
		start := time.Now()
		c, err := h.Call(ctx, "count", frame.MustPayload(map[string]any{"n": 1}), opts...)
		require.NoError(t, err)
		if _, err := c.Wait(); err != nil {
			require.FailNow(t, fmt.Sprint(err))
		}
		ds[i] = time.Since(start)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[n/2]
}

func TestBlockedObserverDoesNotSlowCalls(t *testing.T) {
	h, _ := testHost(t, realConfig(), 2*time.Minute)
	release := make(chan struct{})
	var mu sync.Mutex
	var seen []calllog.Event
	blocker := eventstore.ObserverFunc(func(ctx context.Context, e calllog.Event) error {
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		mu.Lock()
		seen = append(seen, e)
		mu.Unlock()
		return nil
	})
	const n = 200
	base := callLatency(t, h, n)
	var blocked time.Duration
	ctx := callCtx(t, time.Minute)
	err := h.Program(ctx, "load", func(ctx context.Context) error {
		// One call of 15,000 chunks overflows the blocked observer's queue.
		c, err := h.Call(ctx, "count", frame.MustPayload(map[string]any{"n": recorder.ObserverQueue + 5000}))
		if err != nil {
			return err
		}
		if _, err := c.Wait(); err != nil {
			return err
		}
		blocked = callLatency(t, h, n)
		// Unblocked, the observer catches up; the next events show it
		// what it lost.
		close(release)
		if err := h.FlushObservers(ctx); err != nil {
			return err
		}
		c, err = h.Call(ctx, "count", frame.MustPayload(map[string]any{"n": 1}))
		if err != nil {
			return err
		}
		_, err = c.Wait()
		return err
	}, WithObservers(blocker))
	require.NoError(t, err)
	t.Logf("median call latency: %v without an observer, %v with a blocked one", base, blocked)
	assert.Falsef(t, blocked > 5*base && blocked-base > time.Millisecond, "a blocked observer slowed calls: %v → %v", base, blocked)
	require.NoError(t, h.FlushObservers(ctx))
	mu.Lock()
	defer mu.Unlock()
	// It was given what fit, and every call's start and end: the
	// program's, the long call's and the last one's (the timed calls are
	// not the program's steps).
	starts, ends := 0, 0
	for _, e := range seen {
		switch {
		case e.Kind == calllog.KindStarted:
			starts++
		case e.Kind.IsEnd():
			ends++
		}
	}
	if len(seen) >= recorder.ObserverQueue || starts != 3 || ends != 3 {
		require.FailNow(t, fmt.Sprintf("observer was given %d events, %d starts and %d ends; want fewer than %d, and 3 of each",
			len(seen), starts, ends, recorder.ObserverQueue))
	}
	lossSeen := false
	for i := 1; i < len(seen); i++ {
		if seen[i].After != seen[i-1].Seq {
			lossSeen = true
		}
	}
	require.True(t, lossSeen, "the observer could not see its loss")
	if last := seen[len(seen)-1]; last.Kind != calllog.KindCompleted || !last.Program {
		require.FailNow(t, fmt.Sprintf("the program's end was lost: %+v", last))
	}
}

func TestPanickingObserverWarnedOnce(t *testing.T) {
	logs := &syncBuffer{}
	var calls atomic.Int32
	panicker := eventstore.ObserverFunc(func(context.Context, calllog.Event) error {
		calls.Add(1)
		panic("observer bug")
	})
	cfg := fakeConfig("serve")
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	h := recordedHost(t, cfg, calllog.Options{Observers: []calllog.Observer{panicker}})
	ctx := callCtx(t, 20*time.Second)
	for i := range 3 {
		c, err := h.Call(ctx, "ok", nil)
		require.NoError(t, err)
		okCall(t, c, fmt.Sprint(i))
	}
	require.NoError(t, h.FlushObservers(ctx))
	if n := calls.Load(); n != 1 {
		require.FailNow(t, fmt.Sprintf("the panicking observer was called %d times", n))
	}
	if n := strings.Count(logs.String(), `level=WARN msg="calllog: observer`); n != 1 {
		require.FailNow(t, fmt.Sprintf("%d warnings:\n%s", n, logs))
	}
}

func TestProgramTree(t *testing.T) {
	cfg := fakeConfig("serve")
	invokes := invokeLog(t, &cfg)
	h, _ := testHost(t, cfg, time.Minute)
	ctx := callCtx(t, 20*time.Second)
	obs := &collector{}
	var ids []string
	err := h.Program(ctx, "plan", func(ctx context.Context) error {
		for i := range 2 {
			c, err := h.Call(ctx, "ok", nil)
			if err != nil {
				return err
			}
			okCall(t, c, fmt.Sprint(i))
			ids = append(ids, c.ID())
		}
		// A detached call is a tree of its own.
		c, err := h.Call(Detached(ctx), "ok", nil)
		if err != nil {
			return err
		}
		okCall(t, c, "d")
		ids = append(ids, c.ID())
		return nil
	}, WithObservers(obs))
	require.NoError(t, err)
	require.NoError(t, h.FlushObservers(ctx))
	evs := obs.got()
	root := evs[0]
	require.Falsef(t, !root.Program || root.Kind != calllog.KindStarted || root.Tool != "plan", "first event %+v", root)
	last := evs[len(evs)-1]
	require.Falsef(t, last.Call != root.Call || last.Kind != calllog.KindCompleted, "last event %+v", last)
	for i, e := range evs {
		require.Falsef(t, e.Tree != root.Call || e.Seq != uint64(i+1), "event %d: %+v", i, e)
		require.False(t, e.Call == ids[2], "the detached call was given to the program's observer")
	}
	lines := invokes()
	for _, id := range ids[:2] {
		require.Truef(t, slices.Contains(lines, id+" ok "+root.Call+" "+root.Call), "step %s: invokes %q", id, lines)
	}
	if !slices.Contains(lines, ids[2]+" ok") {
		require.FailNow(t, fmt.Sprintf("detached %s: invokes %q", ids[2], lines))
	}
}

// Calls an observer makes with the context it is given are not fed back
// to it.
func TestObserverOwnCallsNotFedBack(t *testing.T) {
	var h *Host
	ready := make(chan struct{})
	var mu sync.Mutex
	seenCalls := map[string]bool{}
	var own string
	var ownErr error
	obs := eventstore.ObserverFunc(func(ctx context.Context, e calllog.Event) error {
		<-ready
		mu.Lock()
		seenCalls[e.Call] = true
		first := own == "" && ownErr == nil
		mu.Unlock()
		if !first {
			return nil
		}
		c, err := h.Call(ctx, "ok", nil)
		if err == nil {
			err = c.CloseSend()
		}
		if err == nil {
			_, err = c.Wait()
		}
		mu.Lock()
		if c != nil {
			own = c.ID()
		}
		ownErr = err
		mu.Unlock()
		return nil
	})
	cfg := fakeConfig("serve")
	h = recordedHost(t, cfg, calllog.Options{Observers: []calllog.Observer{obs}})
	close(ready)
	ctx := callCtx(t, 20*time.Second)
	c, err := h.Call(ctx, "ok", nil)
	require.NoError(t, err)
	okCall(t, c, "x")
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return own != "" || ownErr != nil })
	require.NoError(t, h.FlushObservers(ctx))
	mu.Lock()
	defer mu.Unlock()
	require.Falsef(t, ownErr != nil || !seenCalls[c.ID()] || seenCalls[own], "own call %s (%v); seen %v", own, ownErr, seenCalls)
}

// Frames yields the required journal's end error after the terminal.
func TestFramesYieldsJournalEndError(t *testing.T) {
	st := &flakyStore{release: make(chan struct{})}
	j := &calllog.Journal{Store: st, Required: true, Timeout: 300 * time.Millisecond}
	cfg := fakeConfig("serve")
	h := recordedHost(t, cfg, calllog.Options{Journal: j})
	defer close(st.release)
	ctx := callCtx(t, 20*time.Second)
	st.holdEnds.Store(true)
	c, err := h.Call(ctx, "ok", nil)
	require.NoError(t, err)
	c.CloseSend()
	var kinds []frame.Kind
	var last error
	for f, err := range c.Frames() {
		if err != nil {
			last = err
			break
		}
		kinds = append(kinds, f.Kind)
	}
	require.Falsef(t, len(kinds) != 2 || kinds[1] != frame.KindCompleted || !errors.Is(last, calllog.ErrJournalEnd), "frames %v, then %v", kinds, last)
	res, werr := c.Wait()
	require.ErrorIs(t, werr, calllog.ErrJournalEnd, "Wait after Frames gave the journal's error still does not take the result as final")
	require.Nil(t, res)
}

// settleEnd waits, through the error's JournalError.Kept, until the call's
// end a required journal had not confirmed is kept: nil when it is, the
// journal's reason when it can no longer be, ctx's error first; any other
// error gives itself back.
func settleEnd(ctx context.Context, err error) error {
	var je *calllog.JournalError
	if !errors.As(err, &je) || je.Kept == nil {
		return err
	}
	return je.Kept(ctx)
}
