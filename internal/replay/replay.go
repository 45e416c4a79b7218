// Package replay rebuilds what the watchers of a call tree saw from its
// kept events: each call's frames, text, and value or error. The
// commands' replay (skulk-host replay) and the module's tests use it; a
// program outside the module reads a tree with calllog.Events or
// calllog.Follow and folds the events itself (docs/events.md says what
// each kind records).
package replay

import (
	"context"
	"errors"
	"unicode/utf8"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
)

// Call is what a watcher saw of one call.
type Call struct {
	// Call, Parent, Tool, ToolVersion and Program are the call's.
	Call, Parent, Tool, ToolVersion string
	// Program is true for a program.
	Program bool
	// Attempts counts the call's requests.
	Attempts int
	// Frames are the provider frames the caller was given for the last
	// attempt: its chunks, then the terminal once ended (none for an
	// unknown end: no terminal was seen). Payloads and media data are there
	// only when the events kept them (calllog.ContentFull). A Replayer without
	// Frames leaves it empty.
	Frames []frame.Frame
	// Text is the call's text: the "text" strings of the last attempt's
	// chunks (needs calllog.ContentFull), at most the Replayer's MaxText bytes of
	// it.
	Text string
	// TextBytes is the length of the whole text, kept in Text or not.
	TextBytes int
	// Ended is true once the call's end was seen, an unknown one (a
	// takeover's, calllog.KindUnknown) included.
	Ended bool
	// Outcome is the call's end (valid when Ended). Its Result is nil when
	// the value was larger than the Replayer's MaxValue: ResultBytes then
	// says how large it was.
	Outcome calllog.Outcome
	// ResultBytes, when not 0, is the size (MessagePack bytes) of a value
	// the Replayer did not keep.
	ResultBytes int
	// Media describes the media chunks of the last attempt, in order, the
	// first MaxMedia of them, without their data; MediaChunks counts
	// them all.
	Media []calllog.MediaInfo
	// MediaChunks counts the last attempt's chunks that carried media.
	MediaChunks int
	// TraceID and SpanID are the call's trace ids, when its events name
	// them; "" otherwise.
	TraceID, SpanID string
	// Caller, for a tree's outermost call made over NATS, names the call
	// in another tree that made it (its started event's); nil otherwise.
	Caller *calllog.Link
	// Remote, for a call made over NATS, names the tree the serving host
	// recorded it in (its last request's); nil otherwise. Its output is
	// there: replay that tree for its frames and text.
	Remote *calllog.Link
}

// ErrOutcomeUnknown is the Err of a call whose end is KindUnknown: the log
// does not say how the call ended (its writer stopped before its end was
// kept, and a takeover recorded it as unknown).
var ErrOutcomeUnknown = errors.New("calllog: the call's outcome is unknown: its end was not kept")

// Err is the call's error as its caller got it: nil when done or not
// ended, ErrOutcomeUnknown for an unknown end, else a *frame.Error.
func (c *Call) Err() error {
	if !c.Ended {
		return nil
	}
	o := c.Outcome
	switch o.Kind {
	case calllog.KindCompleted:
		return nil
	case calllog.KindUnknown:
		return ErrOutcomeUnknown
	case calllog.KindCancelled:
		if o.Error == nil {
			return &frame.Error{Code: frame.CodeCancelled}
		}
	}
	if o.Error == nil {
		return &frame.Error{Code: frame.CodeProviderError}
	}
	return &frame.Error{Code: o.Error.Code, Message: o.Error.Message}
}

// Tree is what a Replayer rebuilds.
type Tree struct {
	// Calls in the order they started.
	Calls []*Call
	// Lost counts the events numbered but not given, up to the last one
	// given: a tree's events are numbered from 1, so a first event after
	// Seq 1 counts the ones before it too, as a Follower reports them.
	// Unreadable events (Corrupt) are not counted here.
	Lost uint64
	// Corrupt counts the events kept but unreadable (*calllog.CorruptEventError).
	Corrupt uint64
	// Events counts the events given.
	Events uint64
	byID   map[string]*Call
}

// Call returns the replay of the call with id, or nil.
func (r *Tree) Call(id string) *Call { return r.byID[id] }

// Events rebuilds what a watcher of events (in Seq order, as a journal or a
// follower gives them) saw: each call's frames, text, and value or error. A
// request or retry voids the frames and text shown so far, as it did live.
// An event of a call never seen started makes that call appear anyway.
// It keeps everything; a Replayer bounds what it keeps.
func Events(events []calllog.Event) *Tree {
	p := &Replayer{Frames: true}
	for _, e := range events {
		p.Add(e)
	}
	return p.Tree()
}

// FromStore replays the tree kept in store through p, reading it a page
// at a time (calllog.Events): the memory it needs is one page plus what p keeps.
// Unreadable events are counted (Tree.Corrupt) and skipped; another
// store error is returned. A tree with no event kept, readable or not, is
// calllog.ErrNoTree.
func FromStore(ctx context.Context, store calllog.EventStore, tree string, p *Replayer) (*Tree, error) {
	found := false
	for e, err := range calllog.Events(ctx, store, tree, 0) {
		var ce *calllog.CorruptEventError
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
		return nil, calllog.ErrNoTree
	}
	return p.Tree(), nil
}

// Links returns the trees this tree links to, each once, in the order the
// links were seen: the trees its calls made over NATS were recorded in
// (Call.Remote), then the tree of the call that made its outermost call
// (Call.Caller). Each names the linked call.
func (r *Tree) Links() []calllog.Link {
	var out []calllog.Link
	seen := map[string]bool{}
	add := func(l *calllog.Link) {
		if l != nil && !seen[l.Tree] {
			seen[l.Tree] = true
			out = append(out, *l)
		}
	}
	for _, c := range r.Calls {
		add(c.Remote)
	}
	for _, c := range r.Calls {
		add(c.Caller)
	}
	return out
}

// MaxMedia bounds the media chunks a Call describes.
const MaxMedia = 20

// A Replayer rebuilds what watchers saw from events given one at a time,
// in Seq order (Add). Its zero value keeps each call's header, its text and
// its end, and no frames; MaxText and MaxValue bound what it keeps per
// call and MaxKept in all, so that a replay's memory does not grow with
// the payloads. A Replayer is used by one goroutine.
type Replayer struct {
	// Frames keeps each call's frames (Call.Frames), payloads and
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

	r    Tree
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

// Tree returns what was rebuilt so far; later Adds change it.
func (p *Replayer) Tree() *Tree { return &p.r }

// Add gives the replayer the next event.
func (p *Replayer) Add(e calllog.Event) {
	r := &p.r
	if r.byID == nil {
		r.byID = map[string]*Call{}
	}
	r.Events++
	if e.Seq > p.last+1 {
		r.Lost += e.Seq - p.last - 1
	}
	p.last = e.Seq
	c := r.byID[e.Call]
	if c == nil {
		c = &Call{Call: e.Call, Parent: e.Parent, Tool: e.Tool, Program: e.Program}
		r.byID[e.Call] = c
		r.Calls = append(r.Calls, c)
	}
	if e.ToolVersion != "" {
		c.ToolVersion = e.ToolVersion
	}
	if e.TraceID != "" && c.TraceID == "" {
		c.TraceID, c.SpanID = e.TraceID, e.SpanID
	}
	var payload frame.Payload
	if e.Payload != nil {
		payload = e.Payload.Value
	}
	if e.Caller != nil && e.Kind == calllog.KindStarted {
		c.Caller = e.Caller
	}
	switch e.Kind {
	case calllog.KindRequest, calllog.KindRetry:
		if e.Kind == calllog.KindRequest {
			c.Attempts++
			c.Remote = e.Remote
		}
		p.kept -= len(c.Text)
		c.Frames, c.Text, c.TextBytes = nil, "", 0
		c.Media, c.MediaChunks = nil, 0
	case calllog.KindOutput:
		if e.Media != nil && e.FrameKind == frame.KindChunk {
			c.MediaChunks++
			if len(c.Media) < MaxMedia {
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
	case calllog.KindUnknown: // a takeover's: no terminal was seen
		c.Ended = true
		c.Outcome = calllog.Outcome{Kind: calllog.KindUnknown}
	case calllog.KindCompleted, calllog.KindFailed, calllog.KindCancelled:
		c.Ended = true
		if payload != nil {
			if room := p.room(p.MaxValue, 0); room >= 0 && len(payload) > room {
				c.ResultBytes, payload = len(payload), nil
			} else {
				p.kept += len(payload)
			}
		}
		c.Outcome = calllog.Outcome{Kind: e.Kind, Result: payload, Error: e.Error, Refused: e.Refused}
		if !p.Frames {
			return
		}
		f := frame.Frame{CallID: e.Call, Direction: frame.ProviderToCaller, Kind: frame.KindCompleted, Payload: payload}
		if e.Error != nil {
			f.Error = &frame.Error{Code: e.Error.Code, Message: e.Error.Message}
			f.Synthetic = e.Error.Synthetic
		}
		switch e.Kind {
		case calllog.KindFailed:
			f.Kind = frame.KindFailed
		case calllog.KindCancelled:
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

func mediaFrom(m *calllog.MediaInfo) frame.Media {
	switch {
	case m == nil:
		return nil
	case m.Kind == "inline":
		return &frame.InlineMedia{Data: m.Data, MediaType: m.MediaType}
	default:
		return &frame.BlobMedia{BlobID: m.BlobID, SizeBytes: m.Bytes, SHA256: m.SHA256, MediaType: m.MediaType}
	}
}
