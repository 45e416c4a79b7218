package calllog

import (
	"context"
	"io"
	"iter"
	"time"

	"github.com/skulkrt/skulk/frame"
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
type Follower struct {
	store    EventStore
	tree     string
	interval time.Duration

	last       uint64
	lastWriter string
	shown      bool
	ended      bool
	buf        []Event
}

// NewFollower returns a Follower of tree in store that shows the events
// after Seq after (0: from the start). interval bounds the wait between
// reads; 0 means 200 ms.
func NewFollower(store EventStore, tree string, after uint64, interval time.Duration) *Follower {
	if interval <= 0 {
		interval = defaultFollowInterval
	}
	return &Follower{store: store, tree: tree, last: after, interval: interval}
}

// Next returns the next step, waiting for it as long as ctx allows. After
// the tree's outermost call has ended (its end event shown) it returns
// io.EOF. A store error is returned as is; Next may be called again.
func (f *Follower) Next(ctx context.Context) (Step, error) {
	wait := followMinInterval
	for len(f.buf) == 0 {
		if f.ended {
			return Step{}, io.EOF
		}
		evs, err := f.store.EventsAfter(ctx, f.tree, f.last, followBatch)
		if err != nil {
			return Step{}, err
		}
		if len(evs) > 0 {
			f.buf = evs
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
		f.buf = nil
	}
	st.Event = ev
	return st, nil
}

// Steps returns the steps as an iterator, ending at the tree's end (io.EOF
// is not yielded) or at the first error (yielded).
func (f *Follower) Steps(ctx context.Context) iter.Seq2[Step, error] {
	return func(yield func(Step, error) bool) {
		for {
			st, err := f.Next(ctx)
			if err == io.EOF {
				return
			}
			if !yield(st, err) || err != nil {
				return
			}
		}
	}
}

// ReplayedCall is what a watcher saw of one call.
type ReplayedCall struct {
	// Call, Parent, Tool, ToolVersion and Program are the call's.
	Call, Parent, Tool, ToolVersion string
	// Program is true for a program.
	Program bool
	// Attempts counts the call's requests.
	Attempts int
	// Frames are the provider frames the caller was given for the last
	// attempt: its chunks, then the terminal once ended (none for an
	// unknown end: no terminal was seen). Payloads and media
	// data are there only when the events kept them (ContentFull).
	Frames []frame.Frame
	// Text is the call's text: the "text" strings of the last attempt's
	// chunks (needs ContentFull).
	Text string
	// Ended is true once the call's end was seen, an unknown one (a
	// takeover's, KindUnknown) included.
	Ended bool
	// Outcome is the call's end (valid when Ended).
	Outcome Outcome
}

// Err is the call's error as its caller got it: nil when done or not ended.
func (c *ReplayedCall) Err() error {
	if !c.Ended {
		return nil
	}
	return c.Outcome.Err()
}

// ReplayedTree is what Replay rebuilds.
type ReplayedTree struct {
	// Calls in the order they started.
	Calls []*ReplayedCall
	// Lost counts the events numbered but not given, up to the last one
	// given: a tree's events are numbered from 1, so a first event after
	// Seq 1 counts the ones before it too, as a Follower reports them.
	Lost uint64
	byID map[string]*ReplayedCall
}

// Call returns the replay of the call with id, or nil.
func (r *ReplayedTree) Call(id string) *ReplayedCall { return r.byID[id] }

// Replay rebuilds what a watcher of events (in Seq order, as a journal or a
// Follower gives them) saw: each call's frames, text, and value or error. A
// request or retry voids the frames and text shown so far, as it did live.
// An event of a call never seen started makes that call appear anyway.
func Replay(events []Event) *ReplayedTree {
	r := &ReplayedTree{byID: map[string]*ReplayedCall{}}
	var last uint64 // 0: the Seq before a tree's first
	for _, e := range events {
		if e.Seq > last+1 {
			r.Lost += e.Seq - last - 1
		}
		last = e.Seq
		c := r.byID[e.Call]
		if c == nil {
			c = &ReplayedCall{Call: e.Call, Parent: e.Parent, Tool: e.Tool, Program: e.Program}
			r.byID[e.Call] = c
			r.Calls = append(r.Calls, c)
		}
		if e.ToolVersion != "" {
			c.ToolVersion = e.ToolVersion
		}
		var payload frame.Payload
		if e.Payload != nil {
			payload = e.Payload.Value
		}
		switch e.Kind {
		case KindRequest, KindRetry:
			if e.Kind == KindRequest {
				c.Attempts++
			}
			c.Frames, c.Text = nil, ""
		case KindOutput:
			f := frame.Frame{CallID: e.Call, Direction: frame.ProviderToCaller, Sequence: e.FrameSeq,
				Kind: e.FrameKind, Payload: payload, Media: mediaFrom(e.Media)}
			c.Frames = append(c.Frames, f)
			if s, ok := payload.Text(); ok {
				c.Text += s
			}
		case KindUnknown: // a takeover's: no terminal was seen
			c.Ended = true
			c.Outcome = Outcome{Kind: KindUnknown}
		case KindCompleted, KindFailed, KindCancelled:
			c.Ended = true
			c.Outcome = Outcome{Kind: e.Kind, Result: payload, Error: e.Error, Refused: e.Refused}
			f := frame.Frame{CallID: e.Call, Direction: frame.ProviderToCaller, Kind: frame.KindCompleted, Payload: payload}
			if e.Error != nil {
				f.Error = &frame.Error{Code: e.Error.Code, Message: e.Error.Message}
				f.Synthetic = e.Error.Synthetic
			}
			switch e.Kind {
			case KindFailed:
				f.Kind = frame.KindFailed
			case KindCancelled:
				f.Kind = frame.KindCancelled
			}
			if n := len(c.Frames); n > 0 {
				f.Sequence = c.Frames[n-1].Sequence + 1
			} else {
				f.Sequence = 1
			}
			c.Frames = append(c.Frames, f)
		}
	}
	return r
}

func mediaFrom(m *MediaInfo) frame.Media {
	switch {
	case m == nil:
		return nil
	case m.Kind == "inline":
		return &frame.InlineMedia{Data: m.Data, MediaType: m.MediaType}
	default:
		return &frame.BlobMedia{BlobID: m.BlobID, SizeBytes: m.Bytes, SHA256: m.SHA256, MediaType: m.MediaType}
	}
}
