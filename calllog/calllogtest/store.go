// Package calllogtest checks that an implementation of calllog.EventStore
// keeps the store rules: claims fence earlier writers and continue the
// numbering, Keep is atomic, ordered and idempotent by (tree, seq), and
// EventsAfter reads from a position.
package calllogtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
)

// Events returns n events of tree numbered from first, written by writer,
// each with a small kept payload.
func Events(tree, writer string, first uint64, n int) []calllog.Event {
	out := make([]calllog.Event, n)
	for i := range out {
		seq := first + uint64(i)
		out[i] = calllog.Event{Kind: calllog.KindOutput, Tree: tree, Writer: writer, Seq: seq, After: seq - 1,
			At: time.Unix(1_700_000_000, int64(seq)).UTC(), Call: tree, Tool: "count", FrameKind: frame.KindChunk, FrameSeq: seq,
			Payload: &calllog.Content{Type: "object", Bytes: 3, Keys: 1}}
	}
	return out
}

// TestStore runs the store rules against the store open returns (a new,
// empty one on each call).
func TestStore(t *testing.T, open func(t *testing.T) calllog.EventStore) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("links between trees are kept", func(t *testing.T) {
		s := open(t)
		c, err := s.Claim(ctx, "t1", "A")
		if err != nil {
			t.Fatal(err)
		}
		evs := Events("t1", "A", 1, 2)
		evs[0].Kind, evs[0].Caller = calllog.KindStarted, &calllog.Link{Tree: "c1", Call: "c1-2"}
		evs[1].Kind, evs[1].Remote = calllog.KindRequest, &calllog.Link{Tree: "r9", Call: "r9"}
		evs[1].FrameKind, evs[1].FrameSeq, evs[1].Payload = 0, 0, nil
		if err := s.Keep(ctx, c, evs); err != nil {
			t.Fatal(err)
		}
		got, err := s.EventsAfter(ctx, "t1", 0, 0)
		if err != nil || len(got) != 2 {
			t.Fatalf("EventsAfter(0) = %d events, %v; want 2", len(got), err)
		}
		if got[0].Caller == nil || *got[0].Caller != *evs[0].Caller || got[0].Remote != nil {
			t.Fatalf("started's caller not kept as given: %+v", got[0].Caller)
		}
		if got[1].Remote == nil || *got[1].Remote != *evs[1].Remote || got[1].Caller != nil {
			t.Fatalf("request's remote not kept as given: %+v", got[1].Remote)
		}
	})

	t.Run("claim, keep, read", func(t *testing.T) {
		s := open(t)
		c, err := s.Claim(ctx, "t1", "A")
		if err != nil || c.Epoch == 0 || c.Last != 0 {
			t.Fatalf("first claim = %+v, %v; want epoch ≥ 1, last 0", c, err)
		}
		if err := s.Keep(ctx, c, Events("t1", "A", 1, 5)); err != nil {
			t.Fatal(err)
		}
		got, err := s.EventsAfter(ctx, "t1", 2, 0)
		if err != nil || len(got) != 3 || got[0].Seq != 3 || got[2].Seq != 5 {
			t.Fatalf("EventsAfter(2) = %d events, %v; want seqs 3..5", len(got), err)
		}
		if got[0].Writer != "A" || got[0].Kind != calllog.KindOutput || got[0].Payload == nil || got[0].Payload.Bytes != 3 {
			t.Fatalf("event not kept as given: %+v", got[0])
		}
		got, _ = s.EventsAfter(ctx, "t1", 0, 2)
		if len(got) != 2 || got[1].Seq != 2 {
			t.Fatalf("limit 2 gave %d events", len(got))
		}
		got, err = s.EventsAfter(ctx, "other", 0, 0)
		if err != nil || len(got) != 0 {
			t.Fatalf("unknown tree gave %d events, %v", len(got), err)
		}
	})

	t.Run("keeps the trace ids", func(t *testing.T) {
		s := open(t)
		c, _ := s.Claim(ctx, "t1", "A")
		evs := Events("t1", "A", 1, 2)
		evs[1].TraceID, evs[1].SpanID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
		if err := s.Keep(ctx, c, evs); err != nil {
			t.Fatal(err)
		}
		got, err := s.EventsAfter(ctx, "t1", 0, 0)
		if err != nil || len(got) != 2 {
			t.Fatalf("EventsAfter = %d events, %v", len(got), err)
		}
		if got[0].TraceID != "" || got[0].SpanID != "" || got[1].TraceID != evs[1].TraceID || got[1].SpanID != evs[1].SpanID {
			t.Fatalf("spans read back: %q %q, %q %q; want none, then %q %q", got[0].TraceID, got[0].SpanID, got[1].TraceID, got[1].SpanID, evs[1].TraceID, evs[1].SpanID)
		}
	})

	t.Run("keep is idempotent by tree and seq", func(t *testing.T) {
		s := open(t)
		c, _ := s.Claim(ctx, "t1", "A")
		for range 2 {
			if err := s.Keep(ctx, c, Events("t1", "A", 1, 3)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Keep(ctx, c, Events("t1", "A", 2, 3)); err != nil { // 2,3 again and 4
			t.Fatal(err)
		}
		got, _ := s.EventsAfter(ctx, "t1", 0, 0)
		if len(got) != 4 {
			t.Fatalf("kept %d events, want 4 (no duplicates)", len(got))
		}
		for i, e := range got {
			if e.Seq != uint64(i+1) {
				t.Fatalf("event %d has seq %d", i, e.Seq)
			}
		}
	})

	t.Run("claim fences the earlier writer and continues the numbering", func(t *testing.T) {
		s := open(t)
		a, _ := s.Claim(ctx, "t1", "A")
		if err := s.Keep(ctx, a, Events("t1", "A", 1, 4)); err != nil {
			t.Fatal(err)
		}
		b, err := s.Claim(ctx, "t1", "B")
		if err != nil || b.Epoch <= a.Epoch || b.Last != 4 {
			t.Fatalf("takeover claim = %+v, %v; want a later epoch and last 4", b, err)
		}
		if err := s.Keep(ctx, a, Events("t1", "A", 5, 1)); !errors.Is(err, calllog.ErrFenced) {
			t.Fatalf("fenced writer's keep = %v, want ErrFenced", err)
		}
		if err := s.Keep(ctx, b, Events("t1", "B", 5, 2)); err != nil {
			t.Fatal(err)
		}
		got, _ := s.EventsAfter(ctx, "t1", 3, 0)
		if len(got) != 3 || got[0].Writer != "A" || got[1].Writer != "B" || got[2].Seq != 6 {
			t.Fatalf("after takeover: %d events", len(got))
		}
		// A writer that never claimed is fenced too.
		if err := s.Keep(ctx, calllog.Claim{Tree: "t2", Writer: "C", Epoch: 1}, Events("t2", "C", 1, 1)); !errors.Is(err, calllog.ErrFenced) {
			t.Fatalf("unclaimed keep = %v, want ErrFenced", err)
		}
	})

	t.Run("bad batches are refused whole", func(t *testing.T) {
		s := open(t)
		c, _ := s.Claim(ctx, "t1", "A")
		bad := Events("t1", "A", 1, 3)
		bad[2].Seq = 2
		if err := s.Keep(ctx, c, bad); err == nil || errors.Is(err, calllog.ErrFenced) {
			t.Fatalf("out of order = %v, want a refusal", err)
		}
		other := Events("t2", "A", 1, 1)
		if err := s.Keep(ctx, c, other); err == nil || errors.Is(err, calllog.ErrFenced) {
			t.Fatalf("other tree = %v, want a refusal", err)
		}
		if got, _ := s.EventsAfter(ctx, "t1", 0, 0); len(got) != 0 {
			t.Fatalf("a refused batch kept %d events", len(got))
		}
	})

	t.Run("keep new claims and keeps at once", func(t *testing.T) {
		s, ok := open(t).(interface {
			KeepNew(ctx context.Context, tree, writer string, events []calllog.Event) (calllog.Claim, error)
		})
		if !ok {
			t.Skip("the store has no KeepNew")
		}
		es := s.(calllog.EventStore)
		c, err := s.KeepNew(ctx, "t1", "A", Events("t1", "A", 1, 2))
		if err != nil || c.Epoch == 0 || c.Writer != "A" {
			t.Fatalf("KeepNew = %+v, %v", c, err)
		}
		if c2, err := s.KeepNew(ctx, "t1", "A", Events("t1", "A", 1, 2)); err != nil || c2.Epoch != c.Epoch {
			t.Fatalf("a retry by the same writer = %+v, %v; want its claim", c2, err)
		}
		if _, err := s.KeepNew(ctx, "t1", "B", Events("t1", "B", 1, 1)); !errors.Is(err, calllog.ErrTreeExists) {
			t.Fatalf("another writer's KeepNew = %v, want ErrTreeExists", err)
		}
		if err := es.Keep(ctx, c, Events("t1", "A", 3, 1)); err != nil {
			t.Fatal(err)
		}
		if got, _ := es.EventsAfter(ctx, "t1", 0, 0); len(got) != 3 {
			t.Fatalf("kept %d events, want 3 (no duplicates)", len(got))
		}
		b, _ := es.Claim(ctx, "t1", "B")
		if b.Last != 3 {
			t.Fatalf("takeover claim last = %d", b.Last)
		}
		if _, err := s.KeepNew(ctx, "t1", "A", Events("t1", "A", 4, 1)); !errors.Is(err, calllog.ErrTreeExists) {
			t.Fatalf("KeepNew after a takeover = %v", err)
		}
	})

	t.Run("a done context is honoured", func(t *testing.T) {
		s := open(t)
		dctx, dcancel := context.WithCancel(ctx)
		dcancel()
		if _, err := s.Claim(dctx, "t1", "A"); err == nil {
			t.Fatal("claim with a done context succeeded")
		}
	})
}
