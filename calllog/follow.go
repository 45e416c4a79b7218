package calllog

import (
	"context"
	"errors"
	"io"
	"iter"
	"time"
)

// A Follower reads at most followBatch events at once, and waits between
// two reads of a store that had nothing new from followMinInterval,
// doubling up to its interval (defaultFollowInterval unless given).
const (
	defaultFollowInterval = 200 * time.Millisecond
	followBatch           = 512
	followMinInterval     = 5 * time.Millisecond
)

// Step is what a Follower shows: one kept event, and what happened before
// it that the reader could not see.
type Step struct {
	// Event is the event; its After is the previous event this follower
	// showed (0 for the first).
	Event Event
	// LostFrom and LostTo, when LostFrom is not 0, are the Seqs (inclusive)
	// missing from the store between the previous event shown and this
	// one: events numbered but never kept.
	LostFrom, LostTo uint64
	// TakenOverFrom, when not "", is the writer of the previous event shown:
	// Event's writer took the tree over from it.
	TakenOverFrom string
}

// Follower tails one tree's log in a store, live, from a position: it reads
// what is kept, then polls for more (with a wait that grows to Interval),
// across a writer that took over after a restart. A takeover and any gap
// are shown, never skipped silently. A Follower is used by one goroutine.
//
// A Follower holds at most one read of the store (followBatch events, and
// at most 4 MiB of them from the module's stores).
type Follower struct {
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

// NewFollower returns a Follower of tree in store that shows the events
// after Seq after (0: from the start). interval bounds the wait between
// reads; 0 means 200 ms.
func NewFollower(store EventStore, tree string, after uint64, interval time.Duration) *Follower {
	if interval <= 0 {
		interval = defaultFollowInterval
	}
	return &Follower{store: store, tree: tree, pos: after, last: after, interval: interval}
}

// Next returns the next step, waiting for it as long as ctx allows. After
// the tree's outermost call has ended (its end event shown) it returns
// io.EOF. An event the store cannot read is returned as its
// *CorruptEventError (matching ErrFormat): the Follower has gone past it,
// the next event shown counts it in its LostFrom..LostTo, and Next may be
// called again. Any other store error is returned as is; Next may be
// called again.
func (f *Follower) Next(ctx context.Context) (Step, error) {
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

// Steps returns the steps as an iterator, ending at the tree's end (io.EOF
// is not yielded) or at the first error (yielded), except a
// *CorruptEventError, after which it goes on.
func (f *Follower) Steps(ctx context.Context) iter.Seq2[Step, error] {
	return func(yield func(Step, error) bool) {
		for {
			st, err := f.Next(ctx)
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

// readPage is the most events Events asks a store for at once (the
// module's stores also stop a page at 4 MiB of stored events).
const readPage = 256

// Events returns the kept events of tree with Seq after after, in Seq
// order, as an iterator that reads store a page at a time: it holds one
// page, never the whole tree. An event the store cannot read is yielded as
// (Event{}, its *CorruptEventError) and the iteration goes on after it; any
// other error is yielded and ends it. It ends at the last event kept when
// it reads (it does not wait for more: that is a Follower).
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
