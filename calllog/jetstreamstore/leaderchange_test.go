package jetstreamstore_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/jetstreamstore"
	"github.com/skulkrt/skulk/internal/natstest"
	"github.com/skulkrt/skulk/internal/recorder"
	"github.com/skulkrt/skulk/internal/testnet"
)

// timedCall is one call of a stall measurement: when it began and how long
// its required journal made it take.
type timedCall struct {
	at  time.Time
	dur time.Duration
}

// callsWhile makes calls one after another through r (a required journal)
// until stop is closed, and returns them.
func callsWhile(ctx context.Context, t *testing.T, r *recorder.Recorder, prefix string, stop <-chan struct{}) []timedCall {
	var out []timedCall
	for i := 0; ; i++ {
		select {
		case <-stop:
			return out
		default:
		}
		t0 := time.Now()
		if err := call(ctx, r, fmt.Sprintf("%s-%d", prefix, i), 1); err != nil {
			assert.Fail(t, fmt.Sprintf("call %d: %v", i, err))
			return out
		}
		out = append(out, timedCall{t0, time.Since(t0)})
	}
}

// stall is the longest call among calls, and the median of those begun
// before at.
func stall(calls []timedCall, at time.Time) (longest, before time.Duration) {
	var pre []time.Duration
	for _, c := range calls {
		longest = max(longest, c.dur)
		if c.at.Before(at) {
			pre = append(pre, c.dur)
		}
	}
	if len(pre) > 0 {
		slices.Sort(pre)
		before = pre[len(pre)/2]
	}
	return longest, before
}

// TestRequiredJournalStallAtALeaderChangeOnR3 measures what a caller of a
// required journal on an R3 stream waits for while the stream's leader
// changes, with three nats-server processes: the leader killed with
// SIGKILL (a machine lost: the others elect a new leader once the Raft
// election timeout, 4 to 9 s in nats-server, has passed without its
// heartbeats), stopped with SIGTERM (a clean shutdown hands the leadership
// over first), and asked to step down (the JetStream API, for planned
// work). No call fails: each waits, then goes on. The figures are in
// docs/performance.md.
func TestRequiredJournalStallAtALeaderChangeOnR3(t *testing.T) {
	if testing.Short() || os.Getenv("SKULK_LEADER_STALL") == "" {
		t.Skip("runs three nats-server processes for a minute: set SKULK_LEADER_STALL=1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := testnet.Build(t.TempDir(), "github.com/nats-io/nats-server/v2")
	require.NoError(t, err)
	procs := natstest.ProcCluster(t, bin, 3)
	var addrs []string
	for _, p := range procs {
		addrs = append(addrs, p.Addr())
	}
	st, err := jetstreamstore.Open(ctx, "nats://"+strings.Join(addrs, ",")+"/CALLS?replicas=3", jetstreamstore.Options{})
	require.NoError(t, err)
	defer st.Close()
	r, err := recorder.New(calllog.Options{Writer: "A", Journal: &calllog.Journal{Store: st, Required: true}}, nil)
	require.NoError(t, err)
	defer r.Close(ctx)

	leader := func() *natstest.Proc {
		for {
			for _, p := range procs {
				nc, err := nats.Connect("nats://"+p.Addr(), nats.NoReconnect())
				if err != nil {
					continue
				}
				js, _ := jetstream.New(nc)
				s, err := js.Stream(ctx, "CALLS")
				if err == nil && s.CachedInfo().Cluster != nil {
					name := s.CachedInfo().Cluster.Leader
					nc.Close()
					for _, q := range procs {
						if q.Name() == name {
							return q
						}
					}
				}
				nc.Close()
			}
			require.NoError(t, ctx.Err())
			time.Sleep(100 * time.Millisecond)
		}
	}
	measure := func(name string, change func(l *natstest.Proc)) time.Duration {
		stop := make(chan struct{})
		got := make(chan []timedCall, 1)
		go func() { got <- callsWhile(ctx, t, r, name, stop) }() // stopped by close(stop)
		time.Sleep(2 * time.Second)
		l := leader()
		at := time.Now()
		change(l)
		time.Sleep(15 * time.Second)
		close(stop)
		calls := <-got
		longest, before := stall(calls, at)
		t.Logf("%s (leader %s): %d calls, median %v before, longest %v", name, l.Name(), len(calls), before, longest)
		return longest
	}
	restart := func(p *natstest.Proc) {
		require.NoError(t, p.Start())
		time.Sleep(5 * time.Second) // caught up
	}

	killed := measure("sigkill", func(l *natstest.Proc) { l.Kill(); defer restart(l) })
	stopped := measure("sigterm", func(l *natstest.Proc) { l.Stop(); defer restart(l) })
	stepped := measure("stepdown", func(l *natstest.Proc) {
		nc, err := nats.Connect("nats://" + l.Addr())
		require.NoError(t, err)
		defer nc.Close()
		_, err = nc.Request("$JS.API.STREAM.LEADER.STEPDOWN.CALLS", nil, 5*time.Second)
		require.NoError(t, err)
	})
	require.Less(t, killed, 30*time.Second, "a call waited past the journal's timeout")
	require.Less(t, stopped, 30*time.Second)
	require.Less(t, stepped, 30*time.Second)
}
