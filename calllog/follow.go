package calllog

import (
	"context"
	"errors"
	"io"
	"iter"
	"time"
	"unicode/utf8"

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
	// unknown end: no terminal was seen). Payloads and media data are there
	// only when the events kept them (ContentFull). A Replayer without
	// Frames leaves it empty.
	Frames []frame.Frame
	// Text is the call's text: the "text" strings of the last attempt's
	// chunks (needs ContentFull), at most the Replayer's MaxText bytes of
	// it.
	Text string
	// TextBytes is the length of the whole text, kept in Text or not.
	TextBytes int
	// Ended is true once the call's end was seen, an unknown one (a
	// takeover's, KindUnknown) included.
	Ended bool
	// Outcome is the call's end (valid when Ended). Its Result is nil when
	// the value was larger than the Replayer's MaxValue: ResultBytes then
	// says how large it was.
	Outcome Outcome
	// ResultBytes, when not 0, is the size (MessagePack bytes) of a value
	// the Replayer did not keep.
	ResultBytes int
	// Media describes the media chunks of the last attempt, in order, the
	// first MaxReplayMedia of them, without their data; MediaChunks counts
	// them all.
	Media []MediaInfo
	// MediaChunks counts the last attempt's chunks that carried media.
	MediaChunks int
	// Span is the call's trace ids, when its events name them.
	Span *Span
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
	// Unreadable events (Corrupt) are not counted here.
	Lost uint64
	// Corrupt counts the events kept but unreadable (*CorruptEventError).
	Corrupt uint64
	// Events counts the events given.
	Events uint64
	byID   map[string]*ReplayedCall
}

// Call returns the replay of the call with id, or nil.
func (r *ReplayedTree) Call(id string) *ReplayedCall { return r.byID[id] }

// Replay rebuilds what a watcher of events (in Seq order, as a journal or a
// Follower gives them) saw: each call's frames, text, and value or error. A
// request or retry voids the frames and text shown so far, as it did live.
// An event of a call never seen started makes that call appear anyway.
// It keeps everything; a Replayer bounds what it keeps.
func Replay(events []Event) *ReplayedTree {
	p := &Replayer{Frames: true}
	for _, e := range events {
		p.Add(e)
	}
	return p.ReplayedTree()
}

// ReplayTree replays the tree kept in store through p, reading it a page
// at a time (Events): the memory it needs is one page plus what p keeps.
// Unreadable events are counted (ReplayedTree.Corrupt) and skipped; another
// store error is returned. A tree with no event kept, readable or not, is
// ErrNoTree.
func ReplayTree(ctx context.Context, store EventStore, tree string, p *Replayer) (*ReplayedTree, error) {
	found := false
	for e, err := range Events(ctx, store, tree, 0) {
		var ce *CorruptEventError
		switch {
		case errors.As(err, &ce):
			p.Corrupt(ce.Seq)
		case err != nil:
			return nil, err
		default:
			p.Add(e)
		}
		found = true
	}
	if !found {
		return nil, ErrNoTree
	}
	return p.ReplayedTree(), nil
}

// MaxReplayMedia bounds the media chunks a ReplayedCall describes.
const MaxReplayMedia = 20

// A Replayer rebuilds what watchers saw from events given one at a time,
// in Seq order (Add). Its zero value keeps each call's header, its text and
// its end, and no frames; MaxText and MaxValue bound what it keeps per
// call and MaxKept in all, so that a replay's memory does not grow with
// the payloads. A Replayer is used by one goroutine.
type Replayer struct {
	// Frames keeps each call's frames (ReplayedCall.Frames), payloads and
	// media included: memory grows with the tree's content.
	Frames bool
	// MaxText bounds the bytes of text kept per call (the rest is counted
	// in TextBytes); 0 means no bound.
	MaxText int
	// MaxValue bounds the size (MessagePack bytes, as kept) of a call's
	// value kept in its Outcome; a larger one is counted in ResultBytes
	// and not kept. 0 means no bound.
	MaxValue int
	// MaxKept bounds the bytes of text and values kept for all the calls
	// together; past it, text and values are counted and not kept. 0
	// means no bound. What each call then holds beside is its ids, tool,
	// counts and end (a few hundred bytes, and its error message, at most
	// 2,048 characters).
	MaxKept int

	r    ReplayedTree
	last uint64 // the Seq of the last event given or found corrupt
	kept int    // the bytes of text and values kept
}

// room returns how many more bytes a call may keep: the least of its own
// bound's rest (own bound max, has n) and the Replayer's; -1 means no
// bound.
func (p *Replayer) room(max, n int) int {
	r := -1
	if max > 0 {
		r = max - n
	}
	if p.MaxKept > 0 && (r < 0 || p.MaxKept-p.kept < r) {
		r = p.MaxKept - p.kept
	}
	return r
}

// Corrupt records that the event seq was kept but cannot be read.
func (p *Replayer) Corrupt(seq uint64) {
	p.r.Corrupt++
	if seq > p.last+1 {
		p.r.Lost += seq - p.last - 1
	}
	p.last = max(p.last, seq)
}

// ReplayedTree returns what was rebuilt so far; later Adds change it.
func (p *Replayer) ReplayedTree() *ReplayedTree { return &p.r }

// Add gives the replayer the next event.
func (p *Replayer) Add(e Event) {
	r := &p.r
	if r.byID == nil {
		r.byID = map[string]*ReplayedCall{}
	}
	r.Events++
	if e.Seq > p.last+1 {
		r.Lost += e.Seq - p.last - 1
	}
	p.last = e.Seq
	c := r.byID[e.Call]
	if c == nil {
		c = &ReplayedCall{Call: e.Call, Parent: e.Parent, Tool: e.Tool, Program: e.Program}
		r.byID[e.Call] = c
		r.Calls = append(r.Calls, c)
	}
	if e.ToolVersion != "" {
		c.ToolVersion = e.ToolVersion
	}
	if e.Span != nil && c.Span == nil {
		sp := *e.Span
		c.Span = &sp
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
		p.kept -= len(c.Text)
		c.Frames, c.Text, c.TextBytes = nil, "", 0
		c.Media, c.MediaChunks = nil, 0
	case KindOutput:
		if e.Media != nil && e.FrameKind == frame.KindChunk {
			c.MediaChunks++
			if len(c.Media) < MaxReplayMedia {
				mi := *e.Media
				mi.Data = nil
				c.Media = append(c.Media, mi)
			}
		}
		if p.Frames {
			f := frame.Frame{CallID: e.Call, Direction: frame.ProviderToCaller, Sequence: e.FrameSeq,
				Kind: e.FrameKind, Payload: payload, Media: mediaFrom(e.Media)}
			c.Frames = append(c.Frames, f)
		}
		if s, ok := payload.Text(); ok {
			c.TextBytes += len(s)
			room := p.room(p.MaxText, len(c.Text))
			if room < 0 || room >= len(s) {
				room = len(s)
			}
			for room > 0 && room < len(s) && !utf8.RuneStart(s[room]) { // cut at a character's start
				room--
			}
			if room > 0 {
				c.Text += string(s[:room])
				p.kept += room
			}
		}
	case KindUnknown: // a takeover's: no terminal was seen
		c.Ended = true
		c.Outcome = Outcome{Kind: KindUnknown}
	case KindCompleted, KindFailed, KindCancelled:
		c.Ended = true
		if payload != nil {
			if room := p.room(p.MaxValue, 0); room >= 0 && len(payload) > room {
				c.ResultBytes, payload = len(payload), nil
			} else {
				p.kept += len(payload)
			}
		}
		c.Outcome = Outcome{Kind: e.Kind, Result: payload, Error: e.Error, Refused: e.Refused}
		if !p.Frames {
			return
		}
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
