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

// Follow tails one tree's log in store, live, from Seq after (0: from the
// start), as an iterator of events: it reads what is kept, then polls for
// more (with a wait that grows to interval; 0 means 200 ms), across a
// writer that took over after a restart. Each event's After is the Seq of
// the event Follow showed before it (0 for the first), so a takeover and
// any gap show, never skipped silently:
//
//   - a gap: an event whose Seq is more than one past its After (for the
//     first event, past after): the events After+1 to Seq-1 were numbered
//     but never kept, or could not be read;
//   - a takeover: an event whose Writer differs from the one of the event
//     shown before it.
//
// The iteration ends after the tree's end (its outermost call's end
// event), or at the first error, which it yields: ctx's error when ctx is
// done first, or the store's. An event the store cannot read is yielded
// as its *CorruptEventError (matching ErrFormat) and the iteration goes on
// past it: the next event shown counts it in its gap.
//
// It holds at most one read of the store (512 events, and at most 4 MiB of
// them from the module's stores). Each range over the iterator follows
// the tree anew, from after; to go on after an error, Follow again from
// the Seq of the last event shown.
func Follow(ctx context.Context, store EventStore, tree string, after uint64, interval time.Duration) iter.Seq2[Event, error] {
	if interval <= 0 {
		interval = defaultFollowInterval
	}
	return func(yield func(Event, error) bool) {
		f := &follower{store: store, tree: tree, pos: after, interval: interval}
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

	pos     uint64 // the Seq the next read starts after
	last    uint64 // the Seq of the last event shown; 0 before the first (Seqs start at 1)
	ended   bool
	buf     []Event
	corrupt *CorruptEventError // to report once buf is shown
}

// next returns the next event, waiting for it as long as ctx allows; io.EOF
// once the tree's end was shown. A *CorruptEventError is returned once,
// after the events before it.
func (f *follower) next(ctx context.Context) (Event, error) {
	wait := followMinInterval
	for len(f.buf) == 0 {
		if f.corrupt != nil {
			err := f.corrupt
			f.corrupt = nil
			return Event{}, err
		}
		if f.ended {
			return Event{}, io.EOF
		}
		evs, err := f.store.EventsAfter(ctx, f.tree, f.pos, followBatch)
		var ce *CorruptEventError
		if errors.As(err, &ce) {
			f.buf, f.corrupt, f.pos = evs, ce, ce.Seq
			continue
		}
		if err != nil {
			return Event{}, err
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
			return Event{}, ctx.Err()
		}
		wait = min(2*wait, f.interval)
	}
	ev := f.buf[0]
	f.buf = f.buf[1:]
	ev.After, f.last = f.last, ev.Seq
	if ev.Kind.IsEnd() && ev.Call == f.tree {
		f.ended = true
		f.buf, f.corrupt = nil, nil
	}
	return ev, nil
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
