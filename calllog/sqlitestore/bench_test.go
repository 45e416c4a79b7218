package sqlitestore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/eventstore"
	"github.com/skulkrt/skulk/internal/recorder"
)

// BenchmarkBestEffortJournal measures events per second through a
// best-effort journal into SQLite: b.N output events of one call, timed
// until Close has kept them all.
func BenchmarkBestEffortJournal(b *testing.B) {
	ctx := context.Background()
	st := open(b, filepath.Join(b.TempDir(), "calls.db"))
	// A queue that holds every event: this measures the writer's rate, not
	// how many events a queue overflow drops.
	r, _ := recorder.New(calllog.Options{Journal: &calllog.Journal{Store: st, Queue: b.N + 16}}, nil)
	rec, _ := r.Begin(ctx, recorder.CallInfo{ID: "bench", Tool: "count"})
	f, _ := frame.NewChunk("bench", frame.ProviderToCaller, 1, frame.MustPayload(map[string]any{"text": "token "}), nil)
	b.ReportAllocs()
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
	kept, _ := st.EventsAfter(ctx, "bench", uint64(b.N), 0)
	if len(kept) != 2 { // the last output and the end
		require.FailNow(b, fmt.Sprintf("kept tail has %d events, want 2", len(kept)))
	}
	b.ReportMetric(float64(b.N+2)/el.Seconds(), "events/s")
}

// BenchmarkCall measures one whole call (Begin, Request, 3 outputs, End)
// with no journal, a best-effort and a required SQLite journal: the
// difference is a required journal's added latency per call.
func BenchmarkCall(b *testing.B) {
	for _, mode := range []string{"none", "best-effort", "required", "required-memory"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			var opts calllog.Options
			switch mode {
			case "best-effort":
				opts.Journal = &calllog.Journal{Store: open(b, filepath.Join(b.TempDir(), "calls.db"))}
			case "required":
				opts.Journal = &calllog.Journal{Store: open(b, filepath.Join(b.TempDir(), "calls.db")), Required: true}
			case "required-memory":
				opts.Journal = &calllog.Journal{Store: &eventstore.Memory{}, Required: true}
			}
			r, _ := recorder.New(opts, nil)
			chunk := frame.MustPayload(map[string]any{"text": "token "})
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				rec, err := r.Begin(ctx, recorder.CallInfo{Tool: "count"})
				require.NoError(b, err)
				rec.Request(recorder.RequestInfo{Child: "c1"})
				for j := range 3 {
					f, _ := frame.NewChunk(rec.ID(), frame.ProviderToCaller, uint64(j+1), chunk, nil)
					rec.Output(f)
				}
				require.NoError(b, rec.End(ctx, recorder.Done(nil)))
			}
			b.StopTimer()
			cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			defer cancel()
			require.NoError(b, r.Close(cctx))
		})
	}
}
