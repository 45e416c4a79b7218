package jetstreamstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/sqlitestore"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/internal/natstest"
	"github.com/skulkrt/skulk/internal/recorder"
	"github.com/skulkrt/skulk/skulktest"
)

// benchStores opens, for one benchmark, each store compared: SQLite, and
// JetStream R1 and R3 (an in-process cluster of three).
func benchStore(b *testing.B, kind string) calllog.EventStore {
	b.Helper()
	switch kind {
	case "sqlite":
		st, err := sqlitestore.Open(filepath.Join(b.TempDir(), "calls.db"))
		require.NoError(b, err)
		b.Cleanup(func() { st.Close() })
		return st
	case "jetstream-r1":
		return open(b, natstest.Run(b).URL()+"/BENCH")
	default:
		var addrs []string
		for _, s := range natstest.RunCluster(b, 3) {
			addrs = append(addrs, s.Addr())
		}
		return open(b, "nats://"+strings.Join(addrs, ",")+"/BENCH?replicas=3")
	}
}

var benchKinds = []string{"sqlite", "jetstream-r1", "jetstream-r3"}

// BenchmarkBestEffortJournal: events per second through a best-effort
// journal, b.N output events of one call, timed until Close has kept them.
func BenchmarkBestEffortJournal(b *testing.B) {
	for _, kind := range benchKinds {
		b.Run(kind, func(b *testing.B) {
			ctx := context.Background()
			st := benchStore(b, kind)
			r, _ := recorder.New(calllog.Options{Journal: &calllog.Journal{Store: st, Queue: b.N + 16}}, nil)
			rec, _ := r.Begin(ctx, recorder.CallInfo{ID: "bench", Tool: "count"})
			f, _ := frame.NewChunk("bench", frame.ProviderToCaller, 1, frame.MustPayload(map[string]any{"text": "token "}), nil)
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				f.Sequence = uint64(i + 1)
				rec.Output(f)
			}
			rec.End(ctx, recorder.Done(nil))
			cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			defer cancel()
			require.NoError(b, r.Close(cctx))
			el := time.Since(start)
			b.StopTimer()
			if kept, _ := st.EventsAfter(ctx, "bench", uint64(b.N), 0); len(kept) != 2 {
				require.FailNow(b, fmt.Sprintf("kept tail has %d events, want 2", len(kept)))
			}
			b.ReportMetric(float64(b.N+2)/el.Seconds(), "events/s")
		})
	}
}

// BenchmarkRequiredCall: one whole call (begin, request, 3 outputs, end)
// with a required journal on each store, and with none: the difference is
// the latency a required journal adds to a call (its start and its end
// each wait for the store).
func BenchmarkRequiredCall(b *testing.B) {
	for _, kind := range append([]string{"none"}, benchKinds...) {
		b.Run(kind, func(b *testing.B) {
			ctx := context.Background()
			var opts calllog.Options
			if kind != "none" {
				opts.Journal = &calllog.Journal{Store: benchStore(b, kind), Required: true}
			}
			r, _ := recorder.New(opts, nil)
			b.ResetTimer()
			for range b.N {
				require.NoError(b, call(ctx, r, "", 3))
			}
			b.StopTimer()
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			require.NoError(b, r.Close(cctx))
		})
	}
}

// BenchmarkRealCall: one real call (count n=1 against cmd/skulk-child,
// half-closed at once, read to its end) through a host with no journal and
// with a required journal on each store, full content, as skulk-host call
// --journal keeps it. The stores and hosts are started first and the
// sub-benchmarks run in turn, so all see the same load; the difference to
// "none" is what a required journal adds to a real call (the host waits
// for the store at the call's start and at its end).
//
//	go test -run '^$' -bench RealCall -count 3 ./calllog/jetstreamstore
func BenchmarkRealCall(b *testing.B) {
	bin := skulktest.Build(b, "github.com/skulkrt/skulk/cmd/skulk-child")
	hosts := map[string]*host.Host{}
	for _, kind := range append([]string{"none"}, benchKinds...) {
		cfg := host.Config{Command: bin, TempDir: b.TempDir()}
		if kind != "none" {
			cfg.CallLog = calllog.Options{FullContent: true,
				Journal: &calllog.Journal{Store: benchStore(b, kind), Required: true}}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		h, err := host.Start(ctx, cfg)
		cancel()
		require.NoError(b, err)
		b.Cleanup(func() { h.Close(context.Background()) }) // before its store closes (cleanups run last first)
		hosts[kind] = h
	}
	args := frame.MustPayload(map[string]any{"n": 1})
	for _, kind := range append([]string{"none"}, benchKinds...) {
		b.Run(kind, func(b *testing.B) {
			h := hosts[kind]
			for b.Loop() {
				c, err := h.Call(context.Background(), "count", args, host.WithInput())
				require.NoError(b, err)
				if _, err := c.Wait(); err != nil {
					require.FailNow(b, fmt.Sprint(err))
				}
			}
		})
	}
}
