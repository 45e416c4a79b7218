package jetstreamstore_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/sqlitestore"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/natstest"
	"github.com/skulkrt/skulk/internal/recorder"
)

// benchStores opens, for one benchmark, each store compared: SQLite, and
// JetStream R1 and R3 (an in-process cluster of three).
func benchStore(b *testing.B, kind string) calllog.EventStore {
	b.Helper()
	switch kind {
	case "sqlite":
		st, err := sqlitestore.Open(filepath.Join(b.TempDir(), "calls.db"))
		if err != nil {
			b.Fatal(err)
		}
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
			r, _ := recorder.New(calllog.Options{Journal: &calllog.Journal{Store: st, Queue: b.N + 16}})
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
			if err := r.Close(cctx); err != nil {
				b.Fatal(err)
			}
			el := time.Since(start)
			b.StopTimer()
			if kept, _ := st.EventsAfter(ctx, "bench", uint64(b.N), 0); len(kept) != 2 {
				b.Fatalf("kept tail has %d events, want 2", len(kept))
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
			r, _ := recorder.New(opts)
			b.ResetTimer()
			for range b.N {
				if err := call(ctx, r, "", 3); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := r.Close(cctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}
