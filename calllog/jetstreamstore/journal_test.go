package jetstreamstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nats-io/nats.go"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/jetstreamstore"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/natstest"
	"github.com/skulkrt/skulk/internal/recorder"
	"github.com/skulkrt/skulk/internal/replay"
)

// call makes one call through r: begin, request, n outputs, end.
func call(ctx context.Context, r *recorder.Recorder, id string, n int) error {
	rec, err := r.Begin(ctx, recorder.CallInfo{ID: id, Tool: "count"})
	if err != nil {
		return err
	}
	rec.Request(recorder.RequestInfo{Child: "c1"})
	for j := range n {
		f, _ := frame.NewChunk(rec.ID(), frame.ProviderToCaller, uint64(j+1), frame.MustPayload(map[string]any{"i": j}), nil)
		rec.Output(f)
	}
	return rec.End(ctx, recorder.Done(nil))
}

// follow reads tree to its end with Follow.
func follow(ctx context.Context, t *testing.T, st calllog.EventStore, tree string) []replay.Step {
	t.Helper()
	var steps []replay.Step
	for s, err := range replay.Steps(calllog.Follow(ctx, st, tree, 0, 20*time.Millisecond)) {
		require.NoError(t, err, "follower")
		steps = append(steps, s)
	}
	return steps
}

// A required journal on an R3 stream keeps running while the stream's
// leader is shut down and started again, and every event it confirmed is
// kept.
func TestRequiredJournalSurvivesAServerRestartOnR3(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	servers := natstest.RunCluster(t, 3)
	var addrs []string
	for _, s := range servers {
		addrs = append(addrs, s.Addr())
	}
	url := "nats://" + strings.Join(addrs, ",") + "/CALLS?replicas=3"
	st, err := jetstreamstore.Open(ctx, url, jetstreamstore.Options{Connect: []nats.Option{nats.ReconnectWait(100 * time.Millisecond)}})
	require.NoError(t, err)
	defer st.Close()
	r, _ := recorder.New(calllog.Options{Writer: "A", Journal: &calllog.Journal{Store: st, Required: true, Timeout: 20 * time.Second}}, nil)
	defer r.Close(ctx)

	var confirmed []string
	calls := 0
	run := func(n int) {
		for range n {
			id := fmt.Sprintf("c%d", calls)
			calls++
			require.NoErrorf(t, call(ctx, r, id, 3), "call %s", id)
			confirmed = append(confirmed, id)
		}
	}
	run(20)
	leader := streamLeader(ctx, t, servers, "CALLS")
	leader.Shutdown()
	run(20) // on the two left, once they have elected a new leader
	require.NoError(t, leader.Start())
	run(20)
	for _, id := range confirmed {
		t0 := time.Now()
		evs, err := st.EventsAfter(ctx, id, 0, 0)
		if d := time.Since(t0); d > time.Second {
			t.Logf("read of %s took %v", id, d)
		}
		require.Falsef(t, err != nil || len(evs) != 6 || evs[0].Kind != calllog.KindStarted || evs[5].Kind != calllog.KindCompleted, "call %s: %d events kept, %v", id, len(evs), err)
	}
	t.Logf("%d calls confirmed across the restart of %s", len(confirmed), leader.Name())
}

func streamLeader(ctx context.Context, t *testing.T, servers []*natstest.Server, stream string) *natstest.Server {
	t.Helper()
	s := jsStream(ctx, t, servers[0].URL(), stream)
	info := s.CachedInfo()
	for _, srv := range servers {
		if info.Cluster != nil && srv.Name() == info.Cluster.Leader {
			return srv
		}
	}
	require.FailNow(t, fmt.Sprintf("no leader of %s among the servers", stream))
	return nil
}

// The server goes away during a best-effort journal: the calls go on at
// once (none waits for the store), the events that overflow the journal's
// queue meanwhile are lost, and a follower sees the loss once the server is
// back.
func TestBestEffortJournalWhileTheServerIsAway(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv := natstest.Run(t)
	st, err := jetstreamstore.Open(ctx, srv.URL()+"/CALLS", jetstreamstore.Options{Connect: []nats.Option{nats.ReconnectWait(100 * time.Millisecond)}})
	require.NoError(t, err)
	defer st.Close()
	r, _ := recorder.New(calllog.Options{Writer: "A", Journal: &calllog.Journal{Store: st, Timeout: 5 * time.Second, Queue: 64}},
		slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	defer r.Close(ctx)

	const tree = "p"
	err = r.Program(ctx, recorder.CallInfo{ID: tree, Tool: "loop"}, func(ctx context.Context) error {
		for i := range 5 {
			if err := call(ctx, r, fmt.Sprintf("before%d", i), 3); err != nil {
				return err
			}
		}
		if err := waitKept(ctx, st, tree, 5*6+1); err != nil {
			return err
		}
		srv.Shutdown()
		// 200 calls of 6 events each, far past the queue's 64: with the
		// store away they take less than one store timeout (5 s) in all,
		// which any call that waited for the store would take alone.
		start := time.Now()
		for i := range 200 {
			if err := call(ctx, r, fmt.Sprintf("away%d", i), 4); err != nil {
				return err
			}
		}
		if d := time.Since(start); d > 5*time.Second {
			return fmt.Errorf("200 calls with the server away took %v", d)
		}
		if err := srv.Start(); err != nil {
			return err
		}
		// Calls again until one is kept: the journal has caught up (what
		// was recorded while its queue was full is lost).
		for i := 0; ; i++ {
			id := fmt.Sprintf("after%d", i)
			if err := call(ctx, r, id, 3); err != nil {
				return err
			}
			if kept(ctx, st, tree, "after") {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	require.NoError(t, err)
	steps := follow(ctx, t, st, tree)
	lost := uint64(0)
	for _, s := range steps {
		if s.LostFrom != 0 {
			lost += s.LostTo - s.LostFrom + 1
		}
	}
	last := steps[len(steps)-1].Event
	require.Falsef(t, lost == 0 || last.Call != tree || last.Kind != calllog.KindCompleted, "followed %d events, %d lost, last %+v; want a loss shown and the program's end", len(steps), lost, last)
	t.Logf("followed %d events; %d shown lost", len(steps), lost)
}

// kept reports whether the end of a call whose id begins with prefix is
// kept in tree.
func kept(ctx context.Context, st calllog.EventStore, tree, prefix string) bool {
	evs, _ := st.EventsAfter(ctx, tree, 0, 0)

	for _, e := range evs {
		if strings.HasPrefix(e.Call, prefix) && e.Kind == calllog.KindCompleted {
			return true
		}
	}
	return false
}

// waitKept waits until the tree's event n is kept.
func waitKept(ctx context.Context, st calllog.EventStore, tree string, n uint64) error {
	for {
		evs, err := st.EventsAfter(ctx, tree, n-1, 1)
		if err == nil && len(evs) == 1 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// The server goes away during a required journal: a call begun then is
// refused (its start not kept), a running call's end is not confirmed
// (journal-end, with its outcome), and JournalError.Kept says it was kept once the
// server is back.
func TestRequiredJournalWhileTheServerIsAway(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv := natstest.Run(t)
	st, err := jetstreamstore.Open(ctx, srv.URL()+"/CALLS", jetstreamstore.Options{Connect: []nats.Option{nats.ReconnectWait(100 * time.Millisecond)}})
	require.NoError(t, err)
	defer st.Close()
	r, _ := recorder.New(calllog.Options{Writer: "A", Journal: &calllog.Journal{Store: st, Required: true, Timeout: time.Second}}, nil)
	defer r.Close(ctx)

	rec, err := r.Begin(ctx, recorder.CallInfo{ID: "running", Tool: "count"})
	require.NoError(t, err)
	rec.Request(recorder.RequestInfo{Child: "c1"})
	srv.Shutdown()
	if _, err := r.Begin(ctx, recorder.CallInfo{ID: "refused", Tool: "count"}); !errors.Is(err, calllog.ErrJournalStart) {
		require.FailNow(t, fmt.Sprintf("a call begun with the server away: %v, want ErrJournalStart", err))
	}
	endErr := rec.End(ctx, recorder.Done(frame.MustPayload(map[string]any{"n": 1})))
	var je *calllog.JournalError
	require.Falsef(t, !errors.As(endErr, &je) || !errors.Is(endErr, calllog.ErrJournalEnd) || je.Outcome.Kind != calllog.KindCompleted, "the end with the server away: %v, want ErrJournalEnd holding the outcome", endErr)
	require.NoError(t, srv.Start())
	sctx, scancel := context.WithTimeout(ctx, 60*time.Second)
	defer scancel()
	require.NoError(t, settleEnd(sctx, endErr), "JournalError.Kept once the server is back")
	evs, err := st.EventsAfter(ctx, "running", 0, 0)
	require.Falsef(t, err != nil || len(evs) != 3 || evs[2].Kind != calllog.KindCompleted, "the settled call: %d events kept, %v", len(evs), err)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

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
