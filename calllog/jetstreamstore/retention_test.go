package jetstreamstore_test

import (
	"context"
	"fmt"
	"iter"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/calllogtest"
	"github.com/skulkrt/skulk/internal/natstest"
	"github.com/skulkrt/skulk/internal/replay"
)

// firstKept returns the Seq of tree's first event the stream still keeps,
// read from the stream itself (not through the store).
func firstKept(ctx context.Context, t *testing.T, url, stream, tree string) uint64 {
	t.Helper()
	s := jsStream(ctx, t, url, stream)
	m, err := s.GetMsg(ctx, 1, jetstream.WithGetMsgSubject("skulk.calllog."+stream+"."+tree+".e"))
	require.NoError(t, err)
	seq, err := strconv.ParseUint(m.Header.Get("Skulk-Seq"), 10, 64)
	require.NoError(t, err)
	return seq
}

// follower is calllog.Follow pulled one step at a time.
type follower struct {
	next   func() (replay.Step, error, bool)
	cancel context.CancelFunc // ends the follow: safe from any goroutine
}

// newFollower follows tree in st from its start; the test's cleanup stops
// it. Its steps fail the test when none comes within 20 s (the events of
// calllogtest.Events never end their tree).
func newFollower(ctx context.Context, t *testing.T, st calllog.EventStore, tree string) *follower {
	sctx, cancel := context.WithCancel(ctx)
	next, stop := iter.Pull2(replay.Steps(calllog.Follow(sctx, st, tree, 0, 20*time.Millisecond)))
	t.Cleanup(func() { stop(); cancel() })
	return &follower{next: next, cancel: cancel}
}

// nextStep returns f's next step, failing the test when none comes in
// time.
func nextStep(t *testing.T, f *follower) replay.Step {
	t.Helper()
	timer := time.AfterFunc(20*time.Second, f.cancel)
	defer timer.Stop()
	s, err, ok := f.next()
	require.Falsef(t, !ok || err != nil, "follower: %v (ended %v)", err, !ok)
	return s
}

// A stream whose max_bytes is far below what the writer keeps drops the
// tree's oldest events. A follower from the start is shown the loss first
// (lost 1..K-1, its first event's after null), then every kept event in
// order; a follower that was reading live when the events went is shown
// each gap where it happened (after naming the last event it was shown),
// and ends with every event the stream still keeps, in order. Replay
// counts the loss.
func TestRetentionDropShownAsLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv := natstest.Run(t)
	// About 70 events of calllogtest.Events fit in 32 KiB; the writer
	// keeps 2,000, more than the stream holds plus what a live reader's
	// consumer buffers (512), so the live reader must meet a gap.
	const tree, total, batch = "t", 2000, 20
	w := open(t, srv.URL()+"/CALLS?max_bytes=32768")
	live := open(t, srv.URL()+"/CALLS")

	c, err := w.KeepNew(ctx, tree, "A", calllogtest.Events(tree, "A", 1, batch))
	require.NoError(t, err)
	lf := newFollower(ctx, t, live, tree)
	for i := range batch { // the live reader has shown all there is
		if s := nextStep(t, lf); s.Event.Seq != uint64(i+1) || s.LostFrom != 0 {
			require.FailNow(t, fmt.Sprintf("live step %d: seq %d, lost %d..%d", i, s.Event.Seq, s.LostFrom, s.LostTo))
		}
	}
	for first := uint64(batch + 1); first <= total; first += batch {
		require.NoError(t, w.Keep(ctx, c, calllogtest.Events(tree, "A", first, batch)))
	}
	k := firstKept(ctx, t, srv.URL(), "CALLS", tree)
	require.Falsef(t, k <= batch+512 || k > total-10, "the stream keeps from event %d of %d: not the drop the test needs", k, total)

	// A reader from the start, after the drop.
	fresh := open(t, srv.URL()+"/CALLS")
	f := newFollower(ctx, t, fresh, tree)
	s := nextStep(t, f)
	if s.LostFrom != 1 || s.LostTo != k-1 || s.Event.Seq != k || s.Event.After != 0 {
		require.FailNow(t, fmt.Sprintf("first step: lost %d..%d, seq %d, after %d; want lost 1..%d, seq %d, after 0 (null)",
			s.LostFrom, s.LostTo, s.Event.Seq, s.Event.After, k-1, k))
	}
	shown := []calllog.Event{s.Event}
	for want := k + 1; want <= total; want++ {
		s := nextStep(t, f)
		require.Falsef(t, s.Event.Seq != want || s.LostFrom != 0 || s.Event.After != want-1, "step after %d: seq %d, lost %d..%d, after %d", want-1, s.Event.Seq, s.LostFrom, s.LostTo, s.Event.After)
		shown = append(shown, s.Event)
	}
	if r := replay.Events(shown); r.Lost != k-1 {
		require.FailNow(t, fmt.Sprintf("Replay counts %d lost, want %d", r.Lost, k-1))
	}

	// The live reader: every gap it is shown is exact, and it ends with
	// the kept events.
	last, gaps, lost := uint64(batch), 0, uint64(0)
	for last < total {
		s := nextStep(t, lf)
		require.Falsef(t, s.Event.Seq <= last || s.Event.After != last, "live: seq %d after %d shown as after %d", s.Event.Seq, last, s.Event.After)
		switch {
		case s.Event.Seq == last+1 && s.LostFrom == 0:
		case s.Event.Seq > last+1 && s.LostFrom == last+1 && s.LostTo == s.Event.Seq-1:
			gaps++
			lost += s.LostTo - s.LostFrom + 1
			require.Falsef(t, s.Event.Seq > k, "live: lost %d..%d, but the stream keeps every event from %d", s.LostFrom, s.LostTo, k)
		default:
			require.FailNow(t, fmt.Sprintf("live: seq %d after %d shown with lost %d..%d", s.Event.Seq, last, s.LostFrom, s.LostTo))
		}
		last = s.Event.Seq
	}
	require.Falsef(t, gaps == 0 || lost == 0, "the live reader was shown no gap (the stream keeps from %d)", k)
	t.Logf("stream keeps events %d..%d; the live reader was shown %d lost in %d gap(s)", k, total, lost, gaps)
}
