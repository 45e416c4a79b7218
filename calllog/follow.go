package calllog

import (
	"context"
	"errors"
	"io"
	"iter"
	"time"
)

// Follow reads at most followBatch events at once, and waits between
// two reads of a store that had nothing new from followMinInterval,
// doubling up to its interval (defaultFollowInterval unless given).
const (
	defaultFollowInterval = 200 * time.Millisecond
	followBatch           = 512
	followMinInterval     = 5 * time.Millisecond
)

// Step is what Follow shows: one kept event, and what happened before
// it that the reader could not see.
type Step struct {
	// Event is the event; its After is the previous event Follow showed
	// (0 for the first).
	Event Event
	// LostFrom and LostTo, when LostFrom is not 0, are the Seqs (inclusive)
	// missing from the store between the previous event shown and this
	// one: events numbered but never kept.
	LostFrom, LostTo uint64
	// TakenOverFrom, when not "", is the writer of the previous event shown:
	// Event's writer took the tree over from it.
	TakenOverFrom string
}

// Follow tails one tree's log in store, live, from Seq after (0: from the
// start), as an iterator of steps: it reads what is kept, then polls for
// more (with a wait that grows to interval; 0 means 200 ms), across a
// writer that took over after a restart. A takeover and any gap are shown
// (Step), never skipped silently.
//
// The iteration ends after the step of the tree's end (its outermost
// call's end event), or at the first error, which it yields: ctx's error
// when ctx is done first, or the store's. An event the store cannot read
// is yielded as its *CorruptEventError (matching ErrFormat) and the
// iteration goes on past it: the next event shown counts it in its
// LostFrom..LostTo.
//
// It holds at most one read of the store (512 events, and at most 4 MiB of
// them from the module's stores). Each range over the iterator follows
// the tree anew, from after; to go on after an error, Follow again from
// the Seq of the last event shown.
func Follow(ctx context.Context, store EventStore, tree string, after uint64, interval time.Duration) iter.Seq2[Step, error] {
	if interval <= 0 {
		interval = defaultFollowInterval
	}
	return func(yield func(Step, error) bool) {
		f := &follower{store: store, tree: tree, pos: after, last: after, interval: interval}
		for {
			st, err := f.next(ctx)
			if err == io.EOF {
				return
			}
			var ce *CorruptEventError
			if !yield(st, err) || (err != nil && !errors.As(err, &ce)) {
				return
			}
		}
	}
}

// follower is Follow's state. It is used by one goroutine.
type follower struct {
	store    EventStore
	tree     string
	interval time.Duration

	pos        uint64 // the Seq the next read starts after
	last       uint64 // the Seq of the last event shown
	lastWriter string
	shown      bool
	ended      bool
	buf        []Event
	corrupt    *CorruptEventError // to report once buf is shown
}

// next returns the next step, waiting for it as long as ctx allows; io.EOF
// once the tree's end was shown. A *CorruptEventError is returned once,
// after the events before it.
func (f *follower) next(ctx context.Context) (Step, error) {
	wait := followMinInterval
	for len(f.buf) == 0 {
		if f.corrupt != nil {
			err := f.corrupt
			f.corrupt = nil
			return Step{}, err
		}
		if f.ended {
			return Step{}, io.EOF
		}
		evs, err := f.store.EventsAfter(ctx, f.tree, f.pos, followBatch)
		var ce *CorruptEventError
		if errors.As(err, &ce) {
			f.buf, f.corrupt, f.pos = evs, ce, ce.Seq
			continue
		}
		if err != nil {
			return Step{}, err
		}
		if len(evs) > 0 {
			f.buf, f.pos = evs, evs[len(evs)-1].Seq
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return Step{}, ctx.Err()
		}
		wait = min(2*wait, f.interval)
	}
	ev := f.buf[0]
	f.buf = f.buf[1:]
	var st Step
	if ev.Seq > f.last+1 {
		st.LostFrom, st.LostTo = f.last+1, ev.Seq-1
	}
	if f.shown && ev.Writer != f.lastWriter {
		st.TakenOverFrom = f.lastWriter
	}
	if f.shown {
		ev.After = f.last
	} else {
		ev.After = 0
	}
	f.last, f.lastWriter, f.shown = ev.Seq, ev.Writer, true
	if ev.Kind.IsEnd() && ev.Call == f.tree {
		f.ended = true
		f.buf, f.corrupt = nil, nil
	}
	st.Event = ev
	return st, nil
}

// readPage is the most events Events asks a store for at once (the
// module's stores also stop a page at 4 MiB of stored events).
const readPage = 256

// Events returns the kept events of tree with Seq after after, in Seq
// order, as an iterator that reads store a page at a time: it holds one
// page, never the whole tree. An event the store cannot read is yielded as
// (Event{}, its *CorruptEventError) and the iteration goes on after it; any
// other error is yielded and ends it. It ends at the last event kept when
// it reads (it does not wait for more: that is Follow).
func Events(ctx context.Context, store EventStore, tree string, after uint64) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for {
			evs, err := store.EventsAfter(ctx, tree, after, readPage)
			for _, e := range evs {
				if !yield(e, nil) {
					return
				}
				after = e.Seq
			}
			var ce *CorruptEventError
			switch {
			case errors.As(err, &ce):
				if !yield(Event{}, ce) {
					return
				}
				after = ce.Seq
			case err != nil:
				yield(Event{}, err)
				return
			case len(evs) == 0:
				return
			}
		}
	}
}
