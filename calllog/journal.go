package calllog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"time"
)

// Journal keeps every tree's log in a store: a host (host.Config.CallLog)
// has at most one, and each tree gets a writer goroutine of its own that
// sends batches in order, one send at a time.
//
// A best-effort journal (Required false) never makes a call wait. A
// required one makes a call wait at its start (not kept: the call is
// refused with ErrJournalStart and its invoke is never written) and at its
// end (not confirmed: ErrJournalEnd with the outcome, after the terminal;
// the error's Kept says later whether it was kept).
//
// A send the store has not answered within Timeout counts as no answer:
// the waiting calls are told, the send is waited for still, and it is sent
// again after it returns — never two sends of one batch at once. A store
// error matching ErrStoreUnusable, ErrFenced or ErrTreeExists stops the
// tree's writer; any other error is no answer and the batch is sent again.
//
// A Journal must not be changed once given to a host.
type Journal struct {
	// Store keeps the events; required.
	Store EventStore
	// Required makes calls wait for their start and end to be kept.
	Required bool
	// Timeout bounds one send; 0 means 30 s.
	Timeout time.Duration
	// Batch is the most events one send carries; 0 means 512.
	Batch int
	// Queue bounds the events waiting to be sent, all the host's trees
	// together, counting one event of room held for the end of every call
	// whose start is queued or sent; 0 means 65,536. See QueueBytes for
	// what overflow drops.
	Queue int
	// QueueBytes bounds the same events in bytes (their content and
	// media, ids and a fixed 256 bytes each, and 12 KiB held for the end
	// of every call whose start was admitted); 0 means 64 MiB.
	//
	// When either bound is reached the queue keeps every call's boundary
	// events and drops the middle ones: a chunk, input, request or retry
	// that does not fit is dropped (counted, and the store shows the gap
	// with its exact range); the end of a call whose start was admitted is
	// always kept (its room was held), with its value left out
	// (Content.ValueDropped) when it does not fit beside what waits; a
	// start is admitted when it and its end fit, else with its arguments
	// left out, else the call is dropped whole with every step made in
	// it, so that no call is kept started and not ended. A required
	// journal fails every later barrier of the tree with
	// ErrJournalEnd (and ErrJournalStart) once one of its events was
	// dropped.
	QueueBytes int64
}

// takeOverTimeout bounds TakeOver's write of the outcomes it records.
const takeOverTimeout = 30 * time.Second

// TakeOver claims tree in store for writer (a restarted host continuing a
// tree another writer left; "" means a random 16-hex-digit name) and
// records, for every call the log shows started and not ended, that its
// outcome is unknown (a KindUnknown end, children before parents,
// numbered after the last kept event): the log cannot prove how such a
// call ended, so TakeOver records no failure, value or cancellation for it. It returns the events it kept. The
// previous writer is fenced from then on (its Keep fails with ErrFenced),
// so nothing it still sends is interleaved. A tree the store has no event
// of is not claimed: ErrNoTree.
//
// TakeOver is for a tree whose writer has stopped: taking over a tree a
// live host is writing fences that host's journal and ends its running
// calls in the log as unknown.
func TakeOver(ctx context.Context, store EventStore, tree, writer string) ([]Event, error) {
	if writer == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		writer = hex.EncodeToString(b[:])
	}
	var ce *CorruptEventError
	if first, err := store.EventsAfter(ctx, tree, 0, 1); err != nil && !errors.As(err, &ce) {
		return nil, err
	} else if len(first) == 0 && ce == nil {
		return nil, ErrNoTree
	}
	c, err := store.Claim(ctx, tree, writer)
	if err != nil {
		return nil, err
	}
	type open struct {
		ev    Event // the call's latest event, without its content
		depth int
	}
	calls := map[string]*open{}
	var order []string
	// Read a page at a time; an unreadable event is skipped (a call whose
	// end it was is still open in what the log shows).
	for e, err := range Events(ctx, store, tree, 0) {
		if errors.As(err, &ce) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if e.Kind.IsEnd() {
			delete(calls, e.Call)
			continue
		}
		o := calls[e.Call]
		if o == nil {
			o = &open{}
			if p := calls[e.Parent]; p != nil {
				o.depth = p.depth + 1
			}
			calls[e.Call] = o
			order = append(order, e.Call)
		}
		e.Payload, e.Media, e.Fragment = nil, nil, ""
		o.ev = e
	}
	var opens []*open
	for i := len(order) - 1; i >= 0; i-- { // latest started first
		if o := calls[order[i]]; o != nil {
			opens = append(opens, o)
			delete(calls, order[i])
		}
	}
	slices.SortStableFunc(opens, func(a, b *open) int { return b.depth - a.depth })
	out := make([]Event, 0, len(opens))
	seq := c.Last
	now := time.Now()
	for _, o := range opens {
		seq++
		e := o.ev
		e.Kind, e.Writer, e.Seq, e.After, e.At = KindUnknown, writer, seq, seq-1, now
		e.Child, e.FrameKind, e.FrameSeq, e.Payload, e.Media, e.Refused, e.Error = "", 0, 0, nil, nil, "", nil
		e.ArgumentsStreamed, e.FragmentKept, e.FragmentIndex, e.FragmentBytes, e.Fragment = false, false, 0, 0, ""
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, nil
	}
	kctx, cancel := context.WithTimeout(ctx, takeOverTimeout)
	defer cancel()
	if err := store.Keep(kctx, c, out); err != nil {
		return nil, err
	}
	return out, nil
}
