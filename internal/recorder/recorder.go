package recorder

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/frame/mpack"
	"github.com/skulkrt/skulk/internal/protocol"
)

// DefaultHistory bounds the events one call keeps for its watchers
// (Record.Events) when calllog.Options.History is 0: a long stream read
// slowly must not make the host hold every chunk, and each open stream's
// history is host memory (the bench module's concurrency sweep measures
// it per stream). Past it, a call's end event is still kept, and its After
// shows the loss.
const DefaultHistory = 64

// DefaultHistoryBytes bounds the bytes of one call's history when
// calllog.Options.HistoryBytes is 0. Media bytes never count: the
// history keeps what a frame's media is (calllog.MediaInfo without Data),
// never its data, so what a child sends as attachments costs the history
// nothing past its events.
const DefaultHistoryBytes = 1 << 20

// MaxHistoryBytes is the ceiling calllog.Options.HistoryBytes is clamped
// to (a Record counts its history's bytes in 32 bits).
const MaxHistoryBytes = 1 << 30

// histEventOverhead is what one history event counts against the byte bound
// beside the content it keeps: its own size (TestEventAndRecordSizes) and
// the header of its payload.
const histEventOverhead = 320

// histStart is the room a call's history starts with: the events of a
// small call (started, request, the caller's started, chunk and completed,
// one output chunk, the end), so that it grows only for a call that
// streams. An entry is 120 bytes (histEntry): growing from empty would
// cost a small call four allocations and about 2 KiB
// (TestHistoryStartsWithRoom measures both; TestEventAndRecordSizes checks
// the sizes). The 8 fill the 1,024-byte size class.
const histStart = 8

// Recorder records the calls of one host: it numbers each tree's events,
// gives them to watchers, observers and the journal. Create it with New and
// Close it when done. It is safe for concurrent use.
type Recorder struct {
	writer  string
	full    bool // Options.FullContent
	journal *calllog.Journal
	logger  *slog.Logger
	history int
	// histBytes bounds the bytes of each call's history
	// (calllog.Options.HistoryBytes, clamped to MaxHistoryBytes).
	histBytes int
	top       []*observerRunner // the recorder's own observers

	// ctx is the observers' and store calls' context; cancel is called by
	// Close once everything was given its chance to finish.
	ctx    context.Context
	cancel context.CancelFunc
	// wg counts every goroutine the recorder started: observer runners,
	// journal writers and their sends.
	wg sync.WaitGroup

	closing atomic.Bool // set when Close starts: journal writers stop retrying
	// budget is the room every tree's journal queue shares (bounded by
	// Journal.Queue and Journal.QueueBytes).
	budget journalBudget
	// redact is the set of payload keys the kept form redacts
	// (Options.Redact); nil for none. Read-only once made.
	redact map[string]struct{}
	lost   losses // see Losses

	mu      sync.Mutex // guards the fields below; never held while taking a tree's lock
	closed  bool
	runners map[*observerRunner]struct{}
	writers map[*journalWriter]struct{}
}

// New returns a Recorder and starts the goroutines of its observers. logger
// receives its warnings (an observer failed or fell behind, a journal
// writer stopped); nil discards them.
func New(opts calllog.Options, logger *slog.Logger) (*Recorder, error) {
	if opts.Journal != nil && opts.Journal.Store == nil {
		return nil, errors.New("calllog: Options.Journal.Store: required")
	}
	r := &Recorder{writer: opts.Writer, full: opts.FullContent, journal: opts.Journal, logger: logger,
		history: opts.History, runners: map[*observerRunner]struct{}{}, writers: map[*journalWriter]struct{}{}}
	for i, k := range opts.Redact {
		if k == "" {
			return nil, errors.New("calllog: Options.Redact[" + strconv.Itoa(i) + "]: empty key")
		}
	}
	if r.writer == "" {
		r.writer = randomID()
	}
	if r.logger == nil {
		r.logger = slog.New(slog.DiscardHandler)
	}
	if r.history <= 0 {
		r.history = DefaultHistory
	}
	for _, k := range opts.Redact {
		if r.redact == nil {
			r.redact = make(map[string]struct{}, len(opts.Redact))
		}
		r.redact[k] = struct{}{}
	}
	r.histBytes = opts.HistoryBytes
	if r.histBytes <= 0 {
		r.histBytes = DefaultHistoryBytes
	}
	r.histBytes = min(r.histBytes, MaxHistoryBytes)
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.mu.Lock()
	r.top = r.startRunnersLocked(opts.Observers, "recorder")
	r.mu.Unlock()
	return r, nil
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Writer returns the recorder's writer name.
func (r *Recorder) Writer() string { return r.writer }

func (r *Recorder) startRunnersLocked(obs []calllog.Observer, layer string) []*observerRunner {
	var out []*observerRunner
	for i, o := range obs {
		if o == nil {
			continue
		}
		or := newObserverRunner(r, o, layer+" observer "+strconv.Itoa(i))
		r.runners[or] = struct{}{}
		r.wg.Add(1)
		go func() { // stopped by or.close (its record ended, or Close) or r.ctx
			defer r.wg.Done()
			or.run()
		}()
		out = append(out, or)
	}
	return out
}

func (r *Recorder) forgetRunner(o *observerRunner) {
	r.mu.Lock()
	delete(r.runners, o)
	r.mu.Unlock()
}

// FlushObservers waits until every observer has been given (or has discarded, having
// failed) every event queued for it when FlushObservers was called. It returns
// ctx.Err() if ctx is done first.
func (r *Recorder) Drain(ctx context.Context) error {
	r.mu.Lock()
	chans := make([]<-chan struct{}, 0, len(r.runners))
	for o := range r.runners {
		chans = append(chans, o.drained())
	}
	r.mu.Unlock()
	for _, ch := range chans {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Close stops the recorder: no call can begin after it starts. It gives
// the journal writers until ctx is done (defaultDrainTimeout when ctx has
// no deadline) to keep what is queued (a send that fails is
// not made again once Close has started), and the observers until ctx is
// done to be given theirs, then cancels the observers' and stores' context
// and waits for every goroutine. It returns ErrCloseTimeout when they have
// not all returned a second after that (an observer or a store that
// ignores its context), also matching ctx's error; else an error matching calllog.ErrCloseDropped,
// saying how many, when journal events were not kept since Close began;
// nil otherwise. Close is idempotent.
func (r *Recorder) Close(ctx context.Context) error {
	lostBefore := r.lost.journalEvents.Load()
	r.closing.Store(true)
	r.mu.Lock()
	r.closed = true
	writers := make([]*journalWriter, 0, len(r.writers))
	for w := range r.writers {
		writers = append(writers, w)
	}
	r.mu.Unlock()
	for _, w := range writers {
		w.finish()
	}
	if len(writers) > 0 {
		dctx, cancel := ctx, context.CancelFunc(func() {})
		if _, ok := ctx.Deadline(); !ok {
			dctx, cancel = context.WithTimeout(ctx, defaultDrainTimeout)
		}
		for _, w := range writers {
			select {
			case <-w.done:
			case <-dctx.Done():
			}
		}
		cancel()
	}
	_ = r.Drain(ctx)
	r.mu.Lock()
	for o := range r.runners {
		o.close()
	}
	r.mu.Unlock()
	r.cancel()
	done := make(chan struct{})
	go func() { // stopped when every recorder goroutine has returned
		r.wg.Wait()
		close(done)
	}()
	// Everything was cancelled: goroutines that honour their context
	// return at once, so a done ctx still gets closeGrace.
	grace := time.NewTimer(closeGrace)
	defer grace.Stop()
	select {
	case <-done:
	case <-ctx.Done():
		select {
		case <-done:
		case <-grace.C:
			return &ctxStopped{ErrCloseTimeout, ctx.Err()}
		}
	}
	if n := r.lost.journalEvents.Load() - lostBefore; n > 0 {
		r.logger.Warn("calllog: journal events not kept at close", "events", n)
		return fmt.Errorf("%w: %d events", calllog.ErrCloseDropped, n)
	}
	return nil
}

// closeGrace is how long Close waits, past its ctx, for goroutines it
// cancelled.
const closeGrace = time.Second

// runningKey marks a context with its running call (*Record; nil when
// detached).
type runningKey struct{}

// Detached returns a context whose calls are trees of their own, for work
// meant to outlive the running call of ctx. Observer marks are kept.
func Detached(ctx context.Context) context.Context {
	return context.WithValue(ctx, runningKey{}, (*Record)(nil))
}

// Running returns the running call of ctx, or nil.
func Running(ctx context.Context) *Record {
	rec, _ := ctx.Value(runningKey{}).(*Record)
	return rec
}

// callerKey marks a context with the call in another tree that a call
// begun with it was made for (*calllog.Link).
type callerKey struct{}

// WithCaller returns ctx marking the calls begun with it that start a
// tree of their own as made for caller, a call in another tree (a call
// over NATS: package remote's serving host). Their started event names
// it (calllog.Event.Caller). A call begun as a step is in its parent's
// tree and names no caller.
func WithCaller(ctx context.Context, caller *calllog.Link) context.Context {
	return context.WithValue(ctx, callerKey{}, caller)
}

// BeginStep begins a call as a step of the running call of ctx, in that
// call's recorder (Begin with Record.Context). With no running call in
// ctx it records nothing and returns nil, nil.
func BeginStep(ctx context.Context, info CallInfo) (*Record, error) {
	parent := Running(ctx)
	if parent == nil {
		return nil, nil
	}
	return parent.t.r.Begin(ctx, info)
}

// TreeOf returns the id of the tree Begin would put a call with id in,
// given ctx: its running call's tree, or id for a tree of its own.
func (r *Recorder) TreeOf(ctx context.Context, id string) string {
	if parent := Running(ctx); parent != nil && parent.t.r == r {
		return parent.t.id
	}
	return id
}

// CallInfo describes a call to Begin.
type CallInfo struct {
	// ID is the call's id, unique in the recorder's store (a host should
	// make ids unique across its restarts); "" means a random one.
	ID string
	// Tool is the tool id, or the program's name.
	Tool string
	// ToolVersion is the version of the tool expected to answer; Request
	// may correct it.
	ToolVersion string
	// Args are the call's arguments; nil for none.
	Args frame.Payload
	// Program marks a program: Go code whose calls are its steps.
	Program bool
	// Observers are given the events of this call and of all its steps.
	Observers []calllog.Observer
	// ArgumentsStreamed marks a call whose arguments arrive as fragments
	// (Record.Arguments) after Begin; Args is then nil and the request
	// carries them (RequestInfo.Args).
	ArgumentsStreamed bool
	// TraceID and SpanID name the call's span: every event of the call
	// carries them (calllog.Event.TraceID, SpanID); "" for none.
	TraceID, SpanID string
}

// tree is one call tree: its numbering and its journal writer.
type tree struct {
	r  *Recorder
	id string
	j  *calllog.Journal // the tree's journal, or nil
	w  *journalWriter   // its writer, or nil

	mu      sync.Mutex // guards the fields below and every record's state
	seq     uint64
	lastAt  time.Time                  // At of the last event
	offered map[*observerRunner]uint64 // last Seq offered to each observer; made with the first offer
	// contents is where output events' Content values come from, carved
	// one at a time so that a stream does not allocate one per chunk; its
	// next refill is twice the last, bounded by maxContentSlab.
	contents []calllog.Content
	slabN    int
}

// maxContentSlab bounds the Content values allocated at once for a tree's
// output events.
const maxContentSlab = 256

// contentLocked returns the full kept form of p (nil for a nil payload),
// from the tree's slab.
func (t *tree) contentLocked(p frame.Payload) *calllog.Content {
	if p == nil {
		return nil
	}
	if len(t.contents) == 0 {
		t.slabN = min(max(2*t.slabN, 4), maxContentSlab)
		t.contents = make([]calllog.Content, t.slabN)
	}
	c := &t.contents[0]
	t.contents = t.contents[1:]
	fillContent(c, p, true)
	return c
}

// Record is one call in the log. The host creates it with Begin and calls
// its methods as the call goes; they are safe for concurrent use, and every
// method but End does nothing once the call has ended.
type Record struct {
	t         *tree
	parent    *Record
	id        string
	parentID  string
	tool      string
	program   bool
	traceID   string            // CallInfo.TraceID
	spanID    string            // CallInfo.SpanID
	observers []*observerRunner // every layer's, in order
	own       []*observerRunner // started for this call; closed at its end
	exclude   []*observerRunner // observers not given this call's events
	done      chan struct{}     // closed at the call's end

	// Guarded by t.mu.
	version   string
	attempt   int
	fragments int32       // streamed arguments recorded so far; guarded by the tree's mu
	histSize  int32       // the bytes of hist (histEventBytes), at most Recorder.histBytes plus one event
	hist      []histEntry // what watchers see; bounded by Recorder.history and Recorder.histBytes
	lastHist  uint64
	notify    chan struct{} // closed and cleared at each new event; nil when none waits
	pending   int           // steps begun and not ended
	ending    bool
	deferred  bool          // End gave up waiting: the last step ends it
	ended     bool          // beside ending and deferred: one word for the three keeps a Record at 352 bytes
	jstate    uint8         // the call's journal state (jNone, ...); in the same word
	idle      chan struct{} // closed when pending reaches 0 while ending
	outcome   calllog.Outcome
	endSeq    uint64
}

// Begin records a call's start. A running call in ctx (see Record.Context)
// makes the new call its step, in its tree; otherwise the call starts a
// tree of its own, whose id is the call's.
//
// With a required journal Begin waits until the start is kept: if it is
// not, the call is recorded as refused and Begin returns the record with a
// *JournalError matching ErrJournalStart — the host must refuse the call and
// never write its invoke. ErrClosed and ErrParentEnded come with a nil
// record: nothing was recorded.
func (r *Recorder) Begin(ctx context.Context, info CallInfo) (*Record, error) {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if info.ID == "" {
		info.ID = randomID()
	}
	parent := Running(ctx)
	if parent != nil && parent.t.r != r {
		parent = nil // a call of another recorder: a tree of its own here
	}
	rec := &Record{id: info.ID, tool: info.Tool, version: info.ToolVersion, program: info.Program,
		traceID: info.TraceID, spanID: info.SpanID,
		done: make(chan struct{}), hist: make([]histEntry, 0, histStart)}
	rec.exclude = excludedBy(ctx)
	var t *tree
	if parent != nil {
		t = parent.t
		t.mu.Lock()
		if parent.ended || (parent.ending && parent.deferred) {
			t.mu.Unlock()
			return nil, calllog.ErrParentEnded
		}
		parent.pending++
		t.mu.Unlock()
		rec.parent, rec.parentID = parent, parent.id
		if len(parent.exclude) > 0 {
			rec.exclude = append(append([]*observerRunner(nil), parent.exclude...), rec.exclude...)
		}
	} else {
		t = &tree{r: r, id: info.ID, j: r.journal}
	}

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		if parent != nil {
			t.mu.Lock()
			parent.stepEndedLocked()
			t.mu.Unlock()
		}
		return nil, ErrClosed
	}
	if parent == nil && t.j != nil {
		t.w = newJournalWriter(r, t.j, t.id)
		r.writers[t.w] = struct{}{}
		r.wg.Add(1)
		go t.w.run() // stopped when the tree ended and is kept, the store is unusable, or Close
	}
	rec.own = r.startRunnersLocked(info.Observers, "call "+info.Tool)
	r.mu.Unlock()
	if parent != nil {
		rec.observers = append(append([]*observerRunner(nil), parent.observers...), rec.own...)
	} else {
		rec.observers = append(append([]*observerRunner(nil), r.top...), rec.own...)
	}
	rec.t = t

	t.mu.Lock()
	started := calllog.Event{Kind: calllog.KindStarted, Payload: t.contentLocked(info.Args), ArgumentsStreamed: info.ArgumentsStreamed}
	if parent == nil {
		started.Caller, _ = ctx.Value(callerKey{}).(*calllog.Link)
	}
	startSeq := t.emitLocked(rec, started, nil)
	t.mu.Unlock()

	if t.j != nil && t.j.Required {
		if err := t.w.wait(ctx, startSeq, false); err != nil {
			t.mu.Lock()
			rec.ending = true
			rec.outcome = Refused("journal_start", frame.CodeUnreachable, calllog.ErrJournalStart)
			rec.finishLocked()
			t.mu.Unlock()
			return rec, journalError(t.w, rec.endSeq, calllog.JournalError{Op: calllog.ErrJournalStart, Tree: t.id, Call: rec.id, Outcome: rec.outcome, Cause: err})
		}
	}
	return rec, nil
}

// emitLocked numbers ev as rec's next event and gives it to rec's watchers
// (and its callers'), rec's observers and the tree's journal. ev's content
// is full, and payload, when not nil, is its payload (ev.Payload is left
// nil: the Content is made only where it is kept); observers and the
// journal get the kept form.
func (t *tree) emitLocked(rec *Record, ev calllog.Event, payload frame.Payload) uint64 {
	t.seq++
	ev.Seq = t.seq
	ev.Tree, ev.Writer = t.id, t.r.writer
	if ev.At.IsZero() {
		ev.At = time.Now()
	}
	if ev.At.Before(t.lastAt) { // a tree's times never go backwards, whatever OutputAt was given
		ev.At = t.lastAt
	}
	t.lastAt = ev.At
	ev.Call, ev.Parent, ev.Tool, ev.ToolVersion, ev.Program = rec.id, rec.parentID, rec.tool, rec.version, rec.program
	ev.TraceID, ev.SpanID = rec.traceID, rec.spanID
	if ev.Attempt == 0 {
		ev.Attempt = rec.attempt
	}
	hev := ev
	if ev.Media != nil && ev.Media.Data != nil {
		// A history keeps what the media is, never its bytes: they are
		// the caller's (Recv gave them), and a child sending attachments
		// must not make the host hold them for as long as the call runs.
		hm := *ev.Media
		hm.Data = nil
		hev.Media = &hm
	}
	// inHist: some history takes the event (appendHistLocked's rule); an
	// event none takes is only numbered there, and never built whole.
	inHist := false
	for a := rec; a != nil && !inHist; a = a.parent {
		inHist = !a.histFullLocked(t.r) || a == rec && hev.Kind.IsEnd()
	}
	var e histEntry
	switch {
	case !inHist:
		e.seq = hev.Seq
	case compactable(&hev):
		e = histEntry{from: rec, version: rec.version, at: hev.At, seq: hev.Seq, frameSeq: hev.FrameSeq,
			payload: payload, media: hev.Media, attempt: int32(min(hev.Attempt, math.MaxInt32)), kind: hev.Kind, fkind: hev.FrameKind}
	default:
		if payload != nil {
			hev.Payload = t.contentLocked(payload)
			ev.Payload = hev.Payload
		}
		e.whole = new(calllog.Event) // a copy: &hev would put hev on the heap for every event
		*e.whole = hev
	}
	for a := rec; a != nil; a = a.parent {
		a.appendHistLocked(e, t.r)
	}
	// The kept form is built only for a reader that gets it: a call with
	// no observer and no journal records its events for watchers alone.
	var kept calllog.Event
	built := false
	if payload != nil && ev.Payload == nil && (t.w != nil || len(rec.observers) > 0) {
		ev.Payload = t.contentLocked(payload)
	}
	for _, o := range rec.observers {
		if !o.wants(ev.Kind) || excluded(rec.exclude, o) {
			continue
		}
		if !built {
			kept, built = t.r.keptForm(ev), true
		}
		k := kept
		k.After = t.offered[o]
		if t.offered == nil {
			t.offered = make(map[*observerRunner]uint64, len(rec.observers))
		}
		t.offered[o] = ev.Seq
		o.offer(k, rec, rec.exclude)
	}
	if t.w != nil {
		if !built {
			kept = t.r.keptForm(ev)
		}
		k := kept
		k.After = ev.Seq - 1
		t.w.add(k, rec)
	}
	return ev.Seq
}

func excluded(ex []*observerRunner, o *observerRunner) bool {
	for _, x := range ex {
		if x == o {
			return true
		}
	}
	return false
}

// appendHistLocked adds e to rec's history while the history is not full
// (histFullLocked); a call's own end event is always kept.
func (rec *Record) appendHistLocked(e histEntry, r *Recorder) {
	e.after = rec.lastHist
	seq := e.seq
	if e.whole != nil {
		seq = e.whole.Seq
	}
	rec.lastHist = seq
	if !rec.histFullLocked(r) || (e.whole != nil && e.whole.Kind.IsEnd() && e.whole.Call == rec.id) {
		rec.hist = append(rec.hist, e)
		rec.histSize += int32(min(e.bytes(), MaxHistoryBytes-1)) // at most histBytes plus this: under 2^31
	}
	if rec.notify != nil {
		close(rec.notify)
		rec.notify = nil
	}
}

// histFullLocked reports whether rec's history takes no more events but
// its end: it holds Recorder.history events, or Recorder.histBytes bytes.
// The event that crosses the byte bound is kept, so a history holds at
// most histBytes plus one event's bytes (an event's content is at most the
// packet's max_header), then the end event.
func (rec *Record) histFullLocked(r *Recorder) bool {
	return len(rec.hist) >= r.history || int(rec.histSize) >= r.histBytes
}

// bytes is what e counts against a history's byte bound: the event itself
// and the content it keeps (payload, argument fragment, strings of its
// media and error). Media data is never kept there. A compact entry counts
// as its whole event would, so the bound means the same for every event.
func (e *histEntry) bytes() int {
	n := histEventOverhead + len(e.payload)
	ev := e.whole
	if ev == nil {
		ev = &calllog.Event{Media: e.media}
	}
	n += len(ev.Fragment)
	if ev.Payload != nil {
		n += len(ev.Payload.Value)
	}
	if m := ev.Media; m != nil {
		n += len(m.MediaType) + len(m.BlobID) + len(m.SHA256)
	}
	if er := ev.Error; er != nil {
		n += len(er.Message)
	}
	return n
}

// histEntry is one event of a call's history. Most of a stream's events
// are its frames, which differ from one another in a few fields: such an
// event is kept compact (the call it is of, those fields and its payload)
// and built whole only when a watcher reads it (event); every other event
// is kept whole. A compact entry is 120 bytes, where a whole event with
// its Content takes 344 (TestHistEntrySize): a call's history is host
// memory for as long as the call runs.
type histEntry struct {
	whole    *calllog.Event // the event, or nil for a compact frame event
	from     *Record        // a compact event's call: the history's own or one of its steps
	version  string         // the call's ToolVersion when the event came
	at       time.Time
	seq      uint64
	after    uint64
	frameSeq uint64
	payload  frame.Payload      // the frame's payload, or nil
	media    *calllog.MediaInfo // what the frame's media is (never its data), or nil
	attempt  int32
	kind     calllog.Kind
	fkind    frame.Kind
}

// compactable reports whether ev, made by emitLocked, can be kept as a
// compact histEntry: a frame event (input or output) with nothing but the
// fields an entry keeps, its payload given apart.
func compactable(ev *calllog.Event) bool {
	return (ev.Kind == calllog.KindOutput || ev.Kind == calllog.KindInput) && ev.Payload == nil &&
		ev.Error == nil && ev.Child == "" && ev.Refused == "" && ev.Fragment == "" && ev.FragmentIndex == 0 &&
		ev.FragmentBytes == 0 && !ev.FragmentKept && !ev.ArgumentsStreamed && ev.Caller == nil && ev.Remote == nil &&
		ev.Attempt >= 0 && ev.Attempt <= math.MaxInt32
}

// event returns the whole event e keeps, for tree t. Its Content, when it
// has a payload, is new; the caller holds t's lock (a compact event's call
// fields are read from its Record).
func (e *histEntry) event(t *tree) calllog.Event {
	if e.whole != nil {
		ev := *e.whole
		ev.After = e.after
		return ev
	}
	f := e.from
	ev := calllog.Event{Kind: e.kind, Program: f.program, Tree: t.id, Writer: t.r.writer, Seq: e.seq, After: e.after,
		At: e.at, Call: f.id, Parent: f.parentID, Tool: f.tool, ToolVersion: e.version, Attempt: int(e.attempt),
		FrameKind: e.fkind, FrameSeq: e.frameSeq, Media: e.media, TraceID: f.traceID, SpanID: f.spanID}
	if e.payload != nil {
		ev.Payload = new(calllog.Content)
		fillContent(ev.Payload, e.payload, true)
	}
	return ev
}

// stepEndedLocked counts one step of rec as ended.
func (rec *Record) stepEndedLocked() {
	rec.pending--
	if rec.pending > 0 || !rec.ending {
		return
	}
	if rec.deferred {
		rec.finishLocked()
		return
	}
	if rec.idle != nil {
		close(rec.idle)
		rec.idle = nil
	}
}

// finishLocked records rec's end (rec.outcome) and tells its caller.
func (rec *Record) finishLocked() {
	t := rec.t
	o := rec.outcome
	ev := calllog.Event{Kind: o.Kind, Error: o.Error, Refused: o.Refused}
	if o.Kind == calllog.KindCompleted {
		ev.Payload = t.contentLocked(o.Result)
	}
	rec.endSeq = t.emitLocked(rec, ev, nil)
	rec.ended = true
	close(rec.done)
	for _, o := range rec.own {
		o.close()
	}
	if rec.parent != nil {
		rec.parent.stepEndedLocked()
	} else if t.w != nil {
		t.w.finish()
	}
}

// Context returns ctx carrying rec as its running call: calls begun with it
// are rec's steps.
func (rec *Record) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, runningKey{}, rec)
}

// ID returns the call's id.
func (rec *Record) ID() string { return rec.id }

// Tree returns the id of the call's tree.
func (rec *Record) Tree() string { return rec.t.id }

// Parent returns the record of the call this one is a step of, or nil.
func (rec *Record) Parent() *Record { return rec.parent }

// Done returns a channel closed when the call's end has been recorded.
func (rec *Record) Done() <-chan struct{} { return rec.done }

// Outcome returns the call's outcome and true once it has ended.
func (rec *Record) Outcome() (calllog.Outcome, bool) {
	rec.t.mu.Lock()
	defer rec.t.mu.Unlock()
	return rec.outcome, rec.ended
}

// emit records ev unless the call is ending or ended.
func (rec *Record) emit(ev calllog.Event, f func()) { rec.emitWith(ev, nil, f) }

// emitWith is emit for an event whose content is payload's (see
// emitLocked).
func (rec *Record) emitWith(ev calllog.Event, payload frame.Payload, f func()) {
	t := rec.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if rec.ending {
		return
	}
	if f != nil {
		f()
	}
	t.emitLocked(rec, ev, payload)
}

// RequestInfo describes an invoke written to a child.
type RequestInfo struct {
	// Child names the child process (its id).
	Child string
	// ToolVersion is the version of the tool that child declared; "" keeps
	// the one known so far.
	ToolVersion string
	// Args, when not nil, are the invoke's arguments, kept on the request
	// event (a call begun with streamed arguments: its started event has
	// none).
	Args frame.Payload
	// Remote, for an invoke sent over NATS, names the tree the serving
	// host records the call in (calllog.Event.Remote); nil otherwise.
	Remote *calllog.Link
}

// Request records an invoke written to a child: a new attempt. Call it
// once the invoke is written.
func (rec *Record) Request(info RequestInfo) {
	rec.emitWith(calllog.Event{Kind: calllog.KindRequest, Child: info.Child, Remote: info.Remote}, info.Args, func() {
		rec.attempt++
		if info.ToolVersion != "" {
			rec.version = info.ToolVersion
		}
	})
}

// Arguments records the next fragment of a call's streamed arguments (see
// CallInfo.ArgumentsStreamed): its text as it came, numbered from 0. Record
// every fragment before the call's Request.
func (rec *Record) Arguments(fragment string) {
	rec.t.mu.Lock()
	defer rec.t.mu.Unlock()
	if rec.ending {
		return
	}
	ev := calllog.Event{Kind: calllog.KindArguments, FragmentIndex: int(rec.fragments), FragmentBytes: len(fragment), Fragment: fragment, FragmentKept: true}
	rec.fragments++
	rec.t.emitLocked(rec, ev, nil)
}

// Retry records that the current attempt was abandoned for another (code
// and message say why). The next Request is the new attempt.
func (rec *Record) Retry(code frame.Code, message string) {
	rec.emit(calllog.Event{Kind: calllog.KindRetry, Error: &frame.Error{Code: code, Message: protocol.SanitizeMessage(message)}}, nil)
}

// Input records a caller frame written to the child.
func (rec *Record) Input(f frame.Frame) {
	rec.emitWith(calllog.Event{Kind: calllog.KindInput, FrameKind: f.Kind, FrameSeq: f.Sequence,
		Media: mediaOf(f.Media, true)}, f.Payload, nil)
}

// Output records a provider chunk given to the caller. A terminal frame
// is recorded by End (see OutcomeOf), not here.
func (rec *Record) Output(f frame.Frame) { rec.OutputAt(f, time.Time{}) }

// OutputAt is Output for a frame received at at (the zero time means now).
// A reader that decodes several frames from one read of its connection
// takes the clock once for all of them, as they arrived together; reading
// the clock is a noticeable part of recording a small frame. An at before
// the tree's last event is taken as that event's time, so that a tree's
// times never go backwards.
func (rec *Record) OutputAt(f frame.Frame, at time.Time) {
	t := rec.t
	t.mu.Lock()
	defer t.mu.Unlock()
	rec.outputLocked(&f, at)
}

// OutputsAt is OutputAt for each of fs in order, all received at at,
// under one lock of the tree: a reader records the frames of one read of
// its connection together.
func (rec *Record) OutputsAt(fs []frame.Frame, at time.Time) {
	t := rec.t
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range fs {
		rec.outputLocked(&fs[i], at)
	}
}

// outputLocked records f as OutputAt does; the tree's lock is held.
func (rec *Record) outputLocked(f *frame.Frame, at time.Time) {
	t := rec.t
	if rec.ending {
		return
	}
	if t.unseenLocked(rec) {
		t.skipLocked(rec, at)
		return
	}
	t.emitLocked(rec, calllog.Event{Kind: calllog.KindOutput, FrameKind: f.Kind, FrameSeq: f.Sequence, At: at,
		Media: mediaOf(f.Media, true)}, f.Payload)
}

// unseenLocked reports whether an event of rec that is not an end would be
// kept nowhere: every history it would join is full, and no observer or
// journal takes it. Such an event is only numbered (skipLocked): building
// it is most of what recording a long stream's chunk costs.
func (t *tree) unseenLocked(rec *Record) bool {
	if t.w != nil {
		return false
	}
	for _, o := range rec.observers {
		if !excluded(rec.exclude, o) {
			return false
		}
	}
	for a := rec; a != nil; a = a.parent {
		if !a.histFullLocked(t.r) {
			return false
		}
	}
	return true
}

// skipLocked numbers an event that unseenLocked found kept nowhere, as
// emitLocked would: the next event kept shows the gap in its After, and
// watchers waiting for any event wake.
func (t *tree) skipLocked(rec *Record, at time.Time) {
	t.seq++
	if at.After(t.lastAt) {
		t.lastAt = at
	}
	for a := rec; a != nil; a = a.parent {
		a.lastHist = t.seq
		if a.notify != nil {
			close(a.notify)
			a.notify = nil
		}
	}
}

// End records the call's outcome. It first waits until every step of the
// call has ended (a call's end comes after all of theirs); if ctx is done
// first, the call will end cancelled when its last step ends and End
// returns ErrStepsRunning, also matching ctx's error. With a required journal End then waits until the
// end is kept: if it is not, End returns a *JournalError matching
// ErrJournalEnd that holds the outcome and the cause (see JournalError.Kept).
func (rec *Record) End(ctx context.Context, o calllog.Outcome) error {
	if !o.Kind.IsEnd() {
		return ErrBadOutcome
	}
	t := rec.t
	t.mu.Lock()
	if rec.ending {
		t.mu.Unlock()
		return ErrEnded
	}
	rec.ending = true
	rec.outcome = o
	for rec.pending > 0 { // a step may begin while End waits: wait for it too
		idle := make(chan struct{})
		rec.idle = idle
		t.mu.Unlock()
		gaveUp := false
		select {
		case <-idle:
		case <-ctx.Done():
			gaveUp = true
		}
		t.mu.Lock()
		if gaveUp && rec.pending > 0 {
			rec.idle = nil
			rec.deferred = true
			rec.outcome = Cancelled("calllog: the caller stopped waiting for the call's steps")
			t.mu.Unlock()
			return &ctxStopped{ErrStepsRunning, ctx.Err()}
		}
	}
	rec.finishLocked()
	t.mu.Unlock()
	return rec.Confirm(ctx)
}

// Finish records the call's outcome without waiting for anything: for a
// call whose steps are still running, the end is recorded, with o, when the
// last of them ends. It is End for a goroutine that must not block (a
// connection's reader); Confirm then waits for the journal. It returns
// ErrEnded when the call's end was recorded or requested already.
func (rec *Record) Finish(o calllog.Outcome) error {
	if !o.Kind.IsEnd() {
		return ErrBadOutcome
	}
	t := rec.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if rec.ending {
		return ErrEnded
	}
	rec.ending = true
	rec.outcome = o
	if rec.pending > 0 {
		rec.deferred = true
		return nil
	}
	rec.finishLocked()
	return nil
}

// Confirm waits until the call's end is recorded and, with a required
// journal, kept. If it is not, Confirm returns a *JournalError matching
// ErrJournalEnd that holds the outcome and the cause (see JournalError.Kept); without
// a required journal it returns nil once the end is recorded. ctx bounds
// the wait (its error is returned as is).
func (rec *Record) Confirm(ctx context.Context) error {
	select {
	case <-rec.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	t := rec.t
	if t.j == nil || !t.j.Required {
		return nil
	}
	t.mu.Lock()
	seq, o := rec.endSeq, rec.outcome
	t.mu.Unlock()
	if err := t.w.wait(ctx, seq, false); err != nil {
		return journalError(t.w, seq, calllog.JournalError{Op: calllog.ErrJournalEnd, Tree: t.id, Call: rec.id, Outcome: o, Cause: err})
	}
	return nil
}

// Events returns the call's events so far and as they come, in order, with
// the tree's numbers, ending after the call's end: its own and its steps'.
// The first event's After is 0; each later one's is the event before it in
// this stream. Events keep full content (the caller's own data). Stop the
// loop to stop watching.
func (rec *Record) Events() iter.Seq[calllog.Event] {
	return func(yield func(calllog.Event) bool) {
		t := rec.t
		i := 0
		first := true
		var batch []calllog.Event // reused: the events built from the history's entries, under the tree's lock
		for {
			t.mu.Lock()
			for i >= len(rec.hist) && !rec.ended {
				if rec.notify == nil {
					rec.notify = make(chan struct{})
				}
				ch := rec.notify
				t.mu.Unlock()
				<-ch
				t.mu.Lock()
			}
			batch = batch[:0]
			for j := range rec.hist[i:] {
				batch = append(batch, rec.hist[i+j].event(t))
			}
			t.mu.Unlock()
			if len(batch) == 0 {
				return
			}
			for _, ev := range batch {
				i++
				if first {
					ev.After, first = 0, false
				}
				if !yield(ev) {
					return
				}
			}
		}
	}
}

// Program runs fn as a program: a call named name whose calls (made with
// the context fn is given) are its steps. It ends once fn has returned and
// every step has ended, done when fn returned nil, else with
// OutcomeOfError(fn's error). It returns fn's error, or the journal's or
// Begin's. A panic in fn ends the program failed and is re-raised.
func (r *Recorder) Program(ctx context.Context, info CallInfo, fn func(ctx context.Context) error) error {
	info.Program = true
	rec, err := r.Begin(ctx, info)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithCancel(rec.Context(ctx))
	defer cancel()
	ended := false
	defer func() {
		if p := recover(); p != nil {
			if !ended {
				_ = rec.End(ctx, Failed(frame.CodeProviderError, "calllog: program panicked", false))
			}
			panic(p)
		}
	}()
	ferr := fn(pctx)
	ended = true
	if eerr := rec.End(ctx, OutcomeOfError(ferr)); eerr != nil && ferr == nil {
		return eerr
	}
	return ferr
}

// fillContent sets c to the kept form of the payload p (not nil).
func fillContent(c *calllog.Content, p frame.Payload, full bool) {
	*c = calllog.Content{Type: "object", Bytes: len(p)}
	r := mpack.NewReader(p)
	if n, err := r.ReadMapLen(); err == nil {
		c.Keys = n
	}
	if full {
		c.Value = p
	}
}

// mediaOf returns the kept form of m, or nil.
func mediaOf(m frame.Media, full bool) *calllog.MediaInfo {
	switch v := m.(type) {
	case *frame.InlineMedia:
		if v == nil {
			return nil
		}
		mi := &calllog.MediaInfo{Kind: "inline", MediaType: v.MediaType, Bytes: int64(len(v.Data))}
		if full {
			mi.Data = v.Data
		}
		return mi
	case *frame.BlobMedia:
		if v == nil {
			return nil
		}
		mi := &calllog.MediaInfo{Kind: "blob", MediaType: v.MediaType, Bytes: v.SizeBytes}
		if full {
			mi.BlobID, mi.SHA256 = v.BlobID, v.SHA256
		}
		return mi
	}
	return nil
}

// keptForm returns e as observers and journals see it: under the
// recorder's content policy, with its redaction. e's content fields are
// full; the result shares nothing mutable with e.
func (r *Recorder) keptForm(e calllog.Event) calllog.Event {
	if r.full {
		if r.redact == nil {
			return e
		}
		if e.Payload != nil && e.Payload.Value != nil {
			if v, changed := redactPayload(e.Payload.Value, r.redact); changed {
				c := *e.Payload
				c.Value, c.Redacted = v, true
				e.Payload = &c
			}
		}
		if e.FragmentKept { // text, not an object: its keys cannot be told
			e.Fragment, e.FragmentKept = "", false
		}
		return e
	}
	if e.Payload != nil && e.Payload.Value != nil {
		c := *e.Payload
		c.Value = nil
		e.Payload = &c
	}
	if e.FragmentKept {
		e.Fragment, e.FragmentKept = "", false
	}
	if e.Media != nil && (e.Media.Data != nil || e.Media.BlobID != "" || e.Media.SHA256 != "") {
		m := *e.Media
		m.Data, m.BlobID, m.SHA256 = nil, "", ""
		e.Media = &m
	}
	return e
}

// Done is the outcome of a call that completed with result (nil for none).
func Done(result frame.Payload) calllog.Outcome {
	return calllog.Outcome{Kind: calllog.KindCompleted, Result: result}
}

// Failed is the outcome of a failed call. The message goes through
// protocol.SanitizeMessage.
func Failed(code frame.Code, message string, synthetic bool) calllog.Outcome {
	return calllog.Outcome{Kind: calllog.KindFailed, Error: &frame.Error{Code: code, Message: protocol.SanitizeMessage(message), Synthetic: synthetic}}
}

// Cancelled is the outcome of a cancelled call; message may be empty.
func Cancelled(message string) calllog.Outcome {
	o := calllog.Outcome{Kind: calllog.KindCancelled}
	if message != "" {
		o.Error = &frame.Error{Code: frame.CodeCancelled, Message: protocol.SanitizeMessage(message)}
	}
	return o
}

// Refused is the outcome of a call refused before it reached a child:
// class names why ("unknown_tool", "schema", "pool_down", ...), code is the
// code the caller's error carries and err's message is kept (host errors
// never hold user data).
func Refused(class string, code frame.Code, err error) calllog.Outcome {
	msg := class
	if err != nil {
		msg = err.Error()
	}
	o := Failed(code, msg, false)
	o.Refused = class
	return o
}

// OutcomeOf is the outcome a provider terminal frame gives (completed,
// failed or cancelled, synthetic or not). Any other frame gives a failed
// invalid_frame outcome.
func OutcomeOf(f frame.Frame) calllog.Outcome {
	switch f.Kind {
	case frame.KindCompleted:
		return Done(f.Payload)
	case frame.KindFailed:
		if f.Error != nil {
			return Failed(f.Error.Code, f.Error.Message, f.Synthetic)
		}
	case frame.KindCancelled:
		o := Cancelled("")
		if f.Error != nil {
			o = Cancelled(f.Error.Message)
			o.Error.Synthetic = f.Synthetic
		}
		return o
	}
	return Failed(frame.CodeInvalidFrame, "calllog: outcome from a frame that is not a terminal", true)
}

// OutcomeOfError is the outcome a Go error gives: nil is done, a context
// cancellation is cancelled, a *frame.Error keeps its code, anything else
// is a failed provider_error with the error's message.
func OutcomeOfError(err error) calllog.Outcome {
	var fe *frame.Error
	switch {
	case err == nil:
		return Done(nil)
	case errors.Is(err, context.Canceled):
		return Cancelled(err.Error())
	case errors.As(err, &fe):
		if fe.Code == frame.CodeCancelled {
			return Cancelled(fe.Message)
		}
		return Failed(fe.Code, fe.Message, false)
	}
	return Failed(frame.CodeProviderError, err.Error(), false)
}

// journalError returns je with the wait its Kept runs: until
// the event numbered seq is kept by w (a tree without a journal: none).
func journalError(w *journalWriter, seq uint64, je calllog.JournalError) *calllog.JournalError {
	e := &je
	if w != nil {
		e.Kept = func(ctx context.Context) error { return w.wait(ctx, seq, true) }
	}
	return e
}
