package jetstreamstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/calllogtest"
	"github.com/skulkrt/skulk/calllog/jetstreamstore"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/natstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t testing.TB, url string) *jetstreamstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := jetstreamstore.Open(ctx, url, jetstreamstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// jsStream returns the JetStream stream name on the server at url, to read
// directly rather than through a store, over a connection closed when t
// ends.
func jsStream(ctx context.Context, t *testing.T, url, name string) jetstream.Stream {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	s, err := js.Stream(ctx, name)
	require.NoError(t, err)
	return s
}

func TestStoreRules(t *testing.T) {
	srv := natstest.Run(t)
	n := 0
	calllogtest.TestStore(t, func(t *testing.T) calllog.EventStore {
		n++ // a new, empty stream for each rule
		return open(t, srv.URL()+"/RULES"+string(rune('A'+n)))
	})
}

func TestFullContentRoundTripAndOddTreeIDs(t *testing.T) {
	ctx := context.Background()
	s := open(t, natstest.Run(t).URL()+"/CALLS")
	for _, tree := range []string{"plain-1", "a.b c*>", "é/~x"} {
		c, err := s.Claim(ctx, tree, "w")
		require.NoError(t, err)
		ev := calllogtest.Events(tree, "w", 1, 1)
		ev[0].Payload.Value = frame.MustPayload(map[string]any{"text": "héllo", "n": 3})
		require.NoError(t, s.Keep(ctx, c, ev))
		got, err := s.EventsAfter(ctx, tree, 0, 0)
		require.False(t, err != nil || len(got) != 1, len(got), err)
		if txt, _ := got[0].Payload.Value.Text(); txt != "héllo" || got[0].Tree != tree {
			require.FailNow(t, fmt.Sprintf("event not kept as given: %+v", got[0]))
		}
	}
	if latest, err := s.LatestTree(ctx); err != nil || latest != "é/~x" {
		require.FailNow(t, fmt.Sprintf("LatestTree = %q, %v", latest, err))
	}
}

// Two stores on two connections: the second's claim fences the first,
// whose cached position is stale, and a reader positioned anywhere reads
// on from there (the binary search, then the open consumer).
func TestFencingAcrossConnectionsAndReadPositions(t *testing.T) {
	ctx := context.Background()
	srv := natstest.Run(t)
	a, b := open(t, srv.URL()+"/CALLS"), open(t, srv.URL()+"/CALLS")
	ca, err := a.KeepNew(ctx, "t", "A", calllogtest.Events("t", "A", 1, 3))
	require.NoError(t, err)
	// Another tree in between, so the tree's stream sequences are not
	// contiguous.
	co, _ := a.Claim(ctx, "other", "A")
	for i := range 5 {
		require.NoError(t, a.Keep(ctx, ca, calllogtest.Events("t", "A", uint64(4+2*i), 2)))
		require.NoError(t, a.Keep(ctx, co, calllogtest.Events("other", "A", uint64(1+i), 1)))
	}
	cb, err := b.Claim(ctx, "t", "B")
	require.Falsef(t, err != nil || cb.Last != 13 || cb.Epoch != 2, "takeover claim %+v, %v", cb, err)
	if err := a.Keep(ctx, ca, calllogtest.Events("t", "A", 14, 1)); !errors.Is(err, calllog.ErrFenced) {
		require.FailNow(t, fmt.Sprintf("old writer's keep = %v", err))
	}
	if err := b.Keep(ctx, cb, calllogtest.Events("t", "B", 14, 1200)); err != nil { // two atomic pieces
		require.FailNow(t, fmt.Sprint(err))
	}
	for _, after := range []uint64{0, 1, 7, 12, 13, 500, 1213} {
		r := open(t, srv.URL()+"/CALLS")
		got, err := r.EventsAfter(ctx, "t", after, 100)
		require.NoError(t, err)
		want := min(100, 1213-int(after))
		require.Falsef(t, len(got) != want || (want > 0 && got[0].Seq != after+1), "EventsAfter(%d) = %d events (first %v)", after, len(got), got)
		// The same store reads on from the open consumer.
		if want > 0 {
			next, err := r.EventsAfter(ctx, "t", got[len(got)-1].Seq, 0)
			if err != nil || len(next) != 1213-int(after)-want {
				require.FailNow(t, fmt.Sprintf("read on after %d: %d events, %v", got[len(got)-1].Seq, len(next), err))
			}
		}
	}
}

func TestClosedStoreIsUnusable(t *testing.T) {
	ctx := context.Background()
	s := open(t, natstest.Run(t).URL()+"/CALLS")
	s.Close()
	if _, err := s.Claim(ctx, "t", "w"); !errors.Is(err, calllog.ErrStoreUnusable) {
		require.FailNow(t, fmt.Sprintf("closed claim = %v", err))
	}
	if _, err := s.EventsAfter(ctx, "t", 0, 0); !errors.Is(err, calllog.ErrStoreUnusable) {
		require.FailNow(t, fmt.Sprintf("closed read = %v", err))
	}
}

func TestReadOnly(t *testing.T) {
	ctx := context.Background()
	srv := natstest.Run(t)
	if _, err := jetstreamstore.Open(ctx, srv.URL()+"/MISSING", jetstreamstore.Options{ReadOnly: true}); !errors.Is(err, jetstreamstore.ErrNoStream) {
		require.FailNow(t, fmt.Sprintf("read-only open of a missing stream = %v", err))
	}
	w := open(t, srv.URL()+"/CALLS")
	c, _ := w.Claim(ctx, "t", "w")
	require.NoError(t, w.Keep(ctx, c, calllogtest.Events("t", "w", 1, 2)))
	ro, err := jetstreamstore.Open(ctx, srv.URL()+"/CALLS", jetstreamstore.Options{ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()
	if _, err := ro.Claim(ctx, "t", "x"); !errors.Is(err, calllog.ErrStoreUnusable) {
		require.FailNow(t, fmt.Sprintf("read-only claim = %v", err))
	}
	if got, err := ro.EventsAfter(ctx, "t", 0, 0); err != nil || len(got) != 2 {
		require.FailNow(t, fmt.Sprintf("read-only read: %d events, %v", len(got), err))
	}
}

func TestBadURLs(t *testing.T) {
	ctx := context.Background()
	for _, u := range []string{"http://x/S", "nats://127.0.0.1:1", "nats://127.0.0.1:1/", "nats://u:secret@127.0.0.1:1/S",
		"nats://127.0.0.1:1/a.b", "nats://127.0.0.1:1/S?replicas=9", "nats://127.0.0.1:1/S?secret=1", "nats://127.0.0.1:1/S?tls_cert=x"} {
		_, err := jetstreamstore.Open(ctx, u, jetstreamstore.Options{})
		if !errors.Is(err, jetstreamstore.ErrURL) {
			assert.Fail(t, fmt.Sprintf("Open(%q) = %v, want ErrURL", u, err))
		} else if u == "nats://u:secret@127.0.0.1:1/S" && containsAny(err.Error(), "secret") {
			assert.Fail(t, fmt.Sprintf("the error echoes the URL: %v", err))
		}
	}
}

func containsAny(s string, subs ...string) bool {
	for _, x := range subs {
		for i := 0; i+len(x) <= len(s); i++ {
			if s[i:i+len(x)] == x {
				return true
			}
		}
	}
	return false
}

// A max_age shorter than the duplicate window is accepted: the window
// shrinks to it (the server refuses a window longer than the max age).
func TestShortMaxAge(t *testing.T) {
	ctx := context.Background()
	s := open(t, natstest.Run(t).URL()+"/CALLS?max_age=30s")
	c, err := s.Claim(ctx, "t", "w")
	require.NoError(t, err)
	require.NoError(t, s.Keep(ctx, c, calllogtest.Events("t", "w", 1, 2)))
	if cfg := jetstreamstore.StreamConfig("S", "p", jetstreamstore.Options{MaxAge: 30 * time.Second}); cfg.Duplicates != 30*time.Second {
		require.FailNow(t, fmt.Sprintf("duplicate window %v with a 30 s max age", cfg.Duplicates))
	}
}

// A server whose max_batch_size is below the store's 1,000: Keep and
// KeepNew keep their events in smaller atomic pieces instead of being
// refused again and again until their context is done.
func TestSmallServerBatchLimit(t *testing.T) {
	srv := natstest.Run(t, func(o *server.Options) { o.JetStreamLimits.MaxBatchSize = 10 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := open(t, srv.URL()+"/CALLS")
	c, err := s.KeepNew(ctx, "t", "w", calllogtest.Events("t", "w", 1, 25))
	require.NoError(t, err)
	require.NoError(t, s.Keep(ctx, c, calllogtest.Events("t", "w", 26, 40)))
	got, err := s.EventsAfter(ctx, "t", 0, 0)
	require.Falsef(t, err != nil || len(got) != 65 || got[64].Seq != 65, "%d events kept, %v", len(got), err)
}

// A stream whose allow_atomic is turned off after the store opened it
// cannot keep a batch: Keep fails at once with ErrStoreUnusable (a journal
// stops) rather than sending again until its context is done.
func TestAtomicTurnedOff(t *testing.T) {
	srv := natstest.Run(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := open(t, srv.URL()+"/CALLS")
	c, err := s.Claim(ctx, "t", "w")
	require.NoError(t, err)
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	cfg := jetstreamstore.StreamConfig("CALLS", "skulk.calllog.CALLS", jetstreamstore.Options{})
	cfg.AllowAtomicPublish = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Skipf("the server does not turn allow_atomic off: %v", err)
	}
	if err := s.Keep(ctx, c, calllogtest.Events("t", "w", 1, 3)); !errors.Is(err, calllog.ErrStoreUnusable) {
		require.FailNow(t, fmt.Sprintf("keep with allow_atomic off: %v", err))
	}
}
