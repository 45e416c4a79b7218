package recorder_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/calllogtest"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/eventstore"
	"github.com/skulkrt/skulk/internal/recorder"
	"github.com/skulkrt/skulk/internal/replay"
)

// testStore wraps an eventstore.Memory: Keep can be made to fail, to block until
// released (ignoring its context: a store that does not answer), or to be
// slow; it counts sends and the most at once.
type testStore struct {
	mem      eventstore.Memory     // not embedded: no KeepNew, every send goes through Keep
	fail     atomic.Pointer[error] // Keep returns it when set
	slowN    atomic.Int32          // the next slowN sends take slowFor, then fail
	slowFor  time.Duration
	mu       sync.Mutex
	gate     chan struct{} // when not nil, Keep waits for it to be closed
	sends    int
	inflight int
	maxAtt   int
	firstSeq map[uint64]int // sends per batch (by first seq)
}

func (s *testStore) block() {
	s.mu.Lock()
	s.gate = make(chan struct{})
	s.mu.Unlock()
}

func (s *testStore) unblock() {
	s.mu.Lock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
	s.mu.Unlock()
}

func (s *testStore) setFail(err error) { s.fail.Store(&err) }

func (s *testStore) Keep(ctx context.Context, c calllog.Claim, events []calllog.Event) error {
	s.mu.Lock()
	s.sends++
	s.inflight++
	s.maxAtt = max(s.maxAtt, s.inflight)
	if s.firstSeq == nil {
		s.firstSeq = map[uint64]int{}
	}
	s.firstSeq[events[0].Seq]++
	gate := s.gate
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inflight--
		s.mu.Unlock()
	}()
	if gate != nil {
		<-gate
	}
	if s.slowN.Add(-1) >= 0 {
		time.Sleep(s.slowFor) // a slow store, ignoring ctx on purpose
		return errors.New("store: late and failed")
	}
	if p := s.fail.Load(); p != nil && *p != nil {
		return *p
	}
	return s.mem.Keep(context.Background(), c, events)
}

func (s *testStore) Claim(ctx context.Context, tree, writer string) (calllog.Claim, error) {
	return s.mem.Claim(ctx, tree, writer)
}

func (s *testStore) EventsAfter(ctx context.Context, tree string, after uint64, limit int) ([]calllog.Event, error) {
	return s.mem.EventsAfter(ctx, tree, after, limit)
}

func (s *testStore) stats() (sends, maxAtOnce int, perBatch map[uint64]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[uint64]int{}
	for k, v := range s.firstSeq {
		m[k] = v
	}
	return s.sends, s.maxAtt, m
}

func TestRequiredJournalStartNotKeptRefusesCall(t *testing.T) {
	ctx := testCtx(t)
	for name, storeErr := range map[string]error{
		"store error":    errors.New("store: disk busy"),
		"store unusable": calllog.ErrStoreUnusable,
	} {
		t.Run(name, func(t *testing.T) {
			st := &testStore{}
			st.setFail(storeErr)
			r := newRecorder(t, calllog.Options{Journal: &calllog.Journal{Store: st, Required: true, Timeout: 5 * time.Second}})
			invokeWritten := false
			rec, err := r.Begin(ctx, recorder.CallInfo{ID: "c1", Tool: "count"})
			if err == nil {
				invokeWritten = true // what a host does after Begin succeeds
			}
			var je *calllog.JournalError
			require.Falsef(t, invokeWritten || !errors.As(err, &je) || !errors.Is(err, calllog.ErrJournalStart) || !errors.Is(err, storeErr), "Begin = %v; want a journal-start error holding the store's", err)
			o, ended := rec.Outcome()
			require.Falsef(t, !ended || o.Kind != calllog.KindFailed || o.Refused != "journal_start", "refused call's outcome = %+v (ended %v)", o, ended)
			if errors.Is(storeErr, calllog.ErrStoreUnusable) {
				sends, _, _ := st.stats()
				require.EqualValuesf(t, 1, sends, "an unusable store was sent %d times, want 1 (the writer stops)", sends)
			}
		})
	}
}

func TestRequiredJournalEndNotConfirmedThenSettled(t *testing.T) {
	ctx := testCtx(t)
	st := &testStore{}
	r := newRecorder(t, calllog.Options{Journal: &calllog.Journal{Store: st, Required: true, Timeout: 100 * time.Millisecond}})
	rec, err := r.Begin(ctx, recorder.CallInfo{ID: "c1", Tool: "count"})
	require.NoError(t, err)
	st.block() // the store stops answering
	rec.Request(recorder.RequestInfo{})
	rec.Output(chunk(t, "c1", 1, map[string]any{"text": "hi"}))
	result := frame.MustPayload(map[string]any{"n": 1})
	err = rec.End(ctx, recorder.Done(result))
	var je *calllog.JournalError
	require.Falsef(t, !errors.As(err, &je) || !errors.Is(err, calllog.ErrJournalEnd) || !errors.Is(err, recorder.ErrNoAnswer), "End = %v; want a journal-end error caused by no answer", err)
	require.Falsef(t, je.Outcome.Kind != calllog.KindCompleted || string(je.Outcome.Result) != string(result) || je.Call != "c1", "journal-end error does not hold the outcome: %+v", je.Outcome)
	// A user, who cannot name ErrNoAnswer, tells it from an overflow and
	// from the call's own deadline with errors.Is.
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "no answer is an I/O deadline passed")
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "no answer is not the call's context ending")
	assert.NotErrorIs(t, err, calllog.ErrJournalOverflow)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := settleEnd(short, err); !errors.Is(err, context.DeadlineExceeded) {
		require.FailNow(t, fmt.Sprintf("Settle while the store is down = %v", err))
	}
	st.unblock()
	if err := settleEnd(ctx, err); err != nil {
		require.FailNow(t, fmt.Sprintf("Settle after the store recovered = %v, want nil (kept)", err))
	}
	kept, _ := st.EventsAfter(ctx, "c1", 0, 0)
	require.Falsef(t, len(kept) != 4 || kept[3].Kind != calllog.KindCompleted, "store has %d events", len(kept))
	if _, maxAtOnce, _ := st.stats(); maxAtOnce != 1 {
		require.FailNow(t, fmt.Sprintf("%d sends at once", maxAtOnce))
	}
}

func TestSlowStoreNeverSentTheSameBatchTwiceAtOnce(t *testing.T) {
	ctx := testCtx(t)
	const timeout = 30 * time.Millisecond
	st := &testStore{slowFor: 3 * timeout}
	st.slowN.Store(3)
	r := newRecorder(t, calllog.Options{Journal: &calllog.Journal{Store: st, Required: true, Timeout: timeout}})
	rec, err := r.Begin(ctx, recorder.CallInfo{ID: "c1"})
	require.Falsef(t, !errors.Is(err, calllog.ErrJournalStart) || !errors.Is(err, recorder.ErrNoAnswer), "Begin against a store slower than the timeout = %v; want no answer", err)
	<-rec.Done()
	if err := settleEnd(ctx, err); err != nil { // the writer keeps sending until kept
		require.FailNow(t, fmt.Sprintf("Settle = %v", err))
	}
	sends, maxAtOnce, perBatch := st.stats()
	require.EqualValuesf(t, 1, maxAtOnce, "%d sends at once, want 1", maxAtOnce)
	if perBatch[1] < 4 {
		require.FailNow(t, fmt.Sprintf("the first batch was sent %d times, want ≥ 4 (3 slow, then kept)", perBatch[1]))
	}
	kept, _ := st.EventsAfter(ctx, "c1", 0, 0)
	require.EqualValuesf(t, 2, len(kept), "kept %d events after %d sends, want 2 (started, refused end)", len(kept), sends)
}

func TestBestEffortJournalNeverWaits(t *testing.T) {
	ctx := testCtx(t)
	st := &testStore{}
	st.block()
	r := newRecorder(t, calllog.Options{Journal: &calllog.Journal{Store: st, Timeout: time.Hour}})
	start := time.Now()
	for range 50 {
		runCall(t, ctx, r, recorder.CallInfo{}, 10)
	}
	if d := time.Since(start); d > 10*time.Second {
		require.FailNow(t, fmt.Sprintf("50 calls took %v against a store that does not answer", d))
	}
	st.unblock()
	require.NoError(t, r.Close(ctx))
	if _, maxAtOnce, _ := st.stats(); maxAtOnce > 50 {
		require.FailNow(t, fmt.Sprintf("%d sends at once for 50 trees", maxAtOnce))
	}
}

func TestTreeIDCollisionStopsItsJournal(t *testing.T) {
	ctx := testCtx(t)
	j := &calllog.Journal{Store: &eventstore.Memory{}, Required: true}
	r1 := newRecorder(t, calllog.Options{Journal: j})
	runCall(t, ctx, r1, recorder.CallInfo{ID: "same"}, 1)
	r2 := newRecorder(t, calllog.Options{Journal: j})
	if _, err := r2.Begin(ctx, recorder.CallInfo{ID: "same"}); !errors.Is(err, calllog.ErrTreeExists) {
		require.FailNow(t, fmt.Sprintf("a second tree with a kept id: %v, want ErrTreeExists", err))
	}
}

func TestTakeOverFencesTheOldWriter(t *testing.T) {
	ctx := testCtx(t)
	st := &eventstore.Memory{}
	a := newRecorder(t, calllog.Options{Writer: "A", Journal: &calllog.Journal{Store: st, Required: true}})
	prog, err := a.Begin(ctx, recorder.CallInfo{ID: "p", Program: true})
	require.NoError(t, err)
	step, err := a.Begin(prog.Context(ctx), recorder.CallInfo{ID: "s", Tool: "count"})
	require.NoError(t, err)
	// Writer A "crashes" here; B takes the tree over.
	wrote, err := calllog.TakeOver(ctx, st, "p", "B")
	require.NoError(t, err)
	require.Falsef(t, len(wrote) != 2 || wrote[0].Call != "s" || wrote[1].Call != "p" || wrote[0].Kind != calllog.KindUnknown || wrote[0].Error != nil || wrote[0].Seq != 3 || wrote[0].After != 2, "takeover wrote %+v; want the step's then the program's end, unknown, numbered on", wrote)
	err = step.End(ctx, recorder.Done(nil))
	require.Falsef(t, !errors.Is(err, calllog.ErrJournalEnd) || !errors.Is(err, calllog.ErrFenced), "the old writer's End = %v; want it fenced", err)
	if err := settleEnd(ctx, err); !errors.Is(err, calllog.ErrFenced) {
		require.FailNow(t, fmt.Sprintf("Settle of a fenced end = %v", err))
	}
	prog.End(ctx, recorder.Done(nil))
	kept, _ := st.EventsAfter(ctx, "p", 0, 0)
	if len(kept) != 4 || kept[2].Writer != "B" || kept[3].Kind != calllog.KindUnknown {
		require.FailNow(t, fmt.Sprintf("store has %d events: %+v", len(kept), kinds(kept)))
	}
}

func TestFollowerShowsGapsAndTakeover(t *testing.T) {
	ctx := testCtx(t)
	st := &eventstore.Memory{}
	steps := make(chan replay.Step, 16)
	errc := make(chan error, 1)
	go func() { // stopped by the tree's end or ctx
		defer close(steps)
		for s, err := range replay.Steps(calllog.Follow(ctx, st, "t", 0, 5*time.Millisecond)) {
			if err != nil {
				errc <- err
				return
			}
			steps <- s
		}
		errc <- io.EOF // the iteration ended: the tree's end was shown
	}()
	ca, _ := st.Claim(ctx, "t", "A")
	st.Keep(ctx, ca, calllogtest.Events("t", "A", 1, 3))
	st.Keep(ctx, ca, calllogtest.Events("t", "A", 5, 1)) // 4 never kept
	cb, _ := st.Claim(ctx, "t", "B")
	end := calllogtest.Events("t", "B", 6, 1)
	end[0].Kind, end[0].Error = calllog.KindFailed, &frame.Error{Code: frame.CodeUnreachable, Synthetic: true}
	st.Keep(ctx, cb, end)
	if err := st.Keep(ctx, ca, calllogtest.Events("t", "A", 7, 1)); !errors.Is(err, calllog.ErrFenced) {
		require.FailNow(t, fmt.Sprintf("old writer: %v", err))
	}
	var got []replay.Step
	for s := range steps {
		got = append(got, s)
	}
	require.EqualValuesf(t, 5, len(got), "follower showed %d steps, want 5", len(got))
	if err := <-errc; err != io.EOF {
		require.FailNow(t, fmt.Sprintf("follower ended with %v, want io.EOF at the tree's end", err))
	}
	seqs := [5]uint64{got[0].Event.Seq, got[1].Event.Seq, got[2].Event.Seq, got[3].Event.Seq, got[4].Event.Seq}
	require.Falsef(t, seqs != [5]uint64{1, 2, 3, 5, 6}, "seqs %v", seqs)
	if got[0].Event.After != 0 || got[3].LostFrom != 4 || got[3].LostTo != 4 || got[3].Event.After != 3 {
		require.FailNow(t, fmt.Sprintf("gap not shown: %+v", got[3]))
	}
	if got[4].TakenOverFrom != "A" || got[4].Event.Writer != "B" || got[2].TakenOverFrom != "" {
		require.FailNow(t, fmt.Sprintf("takeover not shown: %+v", got[4]))
	}
}

func TestFinishNeverWaitsConfirmDoes(t *testing.T) {
	ctx := testCtx(t)
	st := &testStore{}
	r := newRecorder(t, calllog.Options{Journal: &calllog.Journal{Store: st, Required: true, Timeout: 100 * time.Millisecond}})
	rec, err := r.Begin(ctx, recorder.CallInfo{ID: "c1"})
	require.NoError(t, err)
	st.block()
	start := time.Now()
	require.NoError(t, rec.Finish(recorder.Failed(frame.CodeTimeout, "deadline", true)))
	if d := time.Since(start); d > 50*time.Millisecond {
		require.FailNow(t, fmt.Sprintf("Finish waited %v for the store", d))
	}
	if err := rec.Finish(recorder.Done(nil)); !errors.Is(err, recorder.ErrEnded) {
		require.FailNow(t, fmt.Sprintf("second Finish = %v", err))
	}
	err = rec.Confirm(ctx)
	var je *calllog.JournalError
	require.Falsef(t, !errors.As(err, &je) || !errors.Is(err, recorder.ErrNoAnswer) || je.Outcome.Error.Code != frame.CodeTimeout, "Confirm = %v", err)
	st.unblock()
	require.NoError(t, settleEnd(ctx, err))
	require.NoError(t, rec.Confirm(ctx), "Confirm once kept =")

	// Finish on a call with a running step records the end after the step's.
	p, _ := r.Begin(ctx, recorder.CallInfo{ID: "p", Program: true})
	s, _ := r.Begin(p.Context(ctx), recorder.CallInfo{ID: "s"})
	p.Finish(recorder.Done(nil))
	select {
	case <-p.Done():
		require.FailNow(t, "ended before its step")
	default:
	}
	s.End(ctx, recorder.Done(nil))
	require.NoError(t, p.Confirm(ctx))
	if o, _ := p.Outcome(); o.Kind != calllog.KindCompleted {
		require.FailNow(t, fmt.Sprintf("deferred outcome = %+v", o))
	}
}

func TestJournalQueueBound(t *testing.T) {
	ctx := testCtx(t)
	st := &testStore{}
	r := newRecorder(t, calllog.Options{Journal: &calllog.Journal{Store: st, Required: true, Queue: 4, Timeout: time.Minute}})
	rec, err := r.Begin(ctx, recorder.CallInfo{ID: "c1"})
	require.NoError(t, err)
	st.block()
	for i := range 10 {
		rec.Output(chunk(t, "c1", uint64(i+1), map[string]any{"i": i}))
	}
	// A second tree shares the bound: its start does not fit.
	if _, err := r.Begin(ctx, recorder.CallInfo{ID: "c2"}); !errors.Is(err, calllog.ErrJournalOverflow) {
		require.FailNow(t, fmt.Sprintf("Begin with the journal queue full = %v, want ErrJournalOverflow", err))
	}
	err = rec.End(ctx, recorder.Done(nil))
	require.Falsef(t, !errors.Is(err, calllog.ErrJournalEnd) || !errors.Is(err, calllog.ErrJournalOverflow), "End after dropped events = %v", err)
	assert.NotErrorIs(t, err, recorder.ErrNoAnswer)
	assert.NotErrorIs(t, err, os.ErrDeadlineExceeded, "an overflow is not a store that did not answer")
	st.unblock()
	if err := settleEnd(ctx, err); !errors.Is(err, calllog.ErrJournalOverflow) {
		require.FailNow(t, fmt.Sprintf("Settle = %v: a tree with dropped events can never be confirmed", err))
	}
	require.NoError(t, r.Close(ctx))
	// Kept: the start, the 2 outputs that fit in the three quarters of
	// the queue middle events may use beside the room held for c1's end,
	// and that end (seq 12). Lost: c1's last 8 outputs, and c2's start
	// and end (a refused call is in the log too: dropped whole).
	kept, _ := st.EventsAfter(ctx, "c1", 0, 0)
	if len(kept) != 4 || kept[2].Seq != 3 || kept[3].Seq != 12 || kept[3].Kind != calllog.KindCompleted {
		require.FailNow(t, fmt.Sprintf("kept %v, want started, 2 outputs and the end", kinds(kept)))
	}
	if l := r.Losses(); l.JournalEvents != 10 || l.ObserverEvents != 0 {
		require.FailNow(t, fmt.Sprintf("Losses() = %+v, want 10 journal events lost", l))
	}
}

// A store that fails is counted once per attempt; the events it finally
// keeps are not lost.
func TestJournalSendErrorsCounted(t *testing.T) {
	ctx := testCtx(t)
	st := &testStore{}
	st.setFail(errors.New("store down"))
	r := newRecorder(t, calllog.Options{Journal: &calllog.Journal{Store: st}})
	rec, err := r.Begin(ctx, recorder.CallInfo{ID: "c1"})
	require.NoError(t, err)
	for r.Losses().JournalSendErrors < 2 {
		select {
		case <-ctx.Done():
			require.FailNow(t, fmt.Sprintf("send errors never counted: %+v", r.Losses()))
		case <-time.After(5 * time.Millisecond):
		}
	}
	st.setFail(nil)
	rec.End(ctx, recorder.Done(nil))
	if err := r.Close(ctx); err != nil { // keeps what is queued
		require.FailNow(t, fmt.Sprint(err))
	}
	if kept, _ := st.EventsAfter(ctx, "c1", 0, 0); len(kept) != 2 {
		require.FailNow(t, fmt.Sprintf("kept %d events, want c1's start and end", len(kept)))
	}
	sends, _, _ := st.stats()
	if l := r.Losses(); l.JournalEvents != 0 || l.JournalSendErrors == 0 || l.JournalSendErrors >= uint64(sends) {
		require.FailNow(t, fmt.Sprintf("Losses() = %+v after %d sends; want send errors counted, fewer than the sends, and nothing lost", l, sends))
	}
}

// TestTakeOverUnknownTree: taking over a tree the store has no event of (a
// mistyped id) is refused with ErrNoTree and claims nothing: a writer
// starting a tree of that id afterwards is not refused as a duplicate.
func TestTakeOverUnknownTree(t *testing.T) {
	ctx := testCtx(t)
	st := &eventstore.Memory{}
	if _, err := calllog.TakeOver(ctx, st, "nosuchtree", "B"); !errors.Is(err, calllog.ErrNoTree) {
		require.FailNow(t, fmt.Sprintf("TakeOver of an unknown tree = %v; want ErrNoTree", err))
	}
	a := newRecorder(t, calllog.Options{Writer: "A", Journal: &calllog.Journal{Store: st, Required: true}})
	rec, err := a.Begin(ctx, recorder.CallInfo{ID: "nosuchtree", Tool: "count"})
	require.NoError(t, err, "a new tree of the id the takeover was refused")
	rec.End(ctx, recorder.Done(nil))
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
