package export

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/skulkrt/skulk/asif"
	"github.com/skulkrt/skulk/asif/internal/asifdoc"
	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/strictjson"
	"github.com/skulkrt/skulk/wire"
)

// DefaultMaxMediaBytes bounds the inline media bytes one document embeds
// (16 MiB). Base64 makes them a third larger, and a document must stay under
// asif.MaxDocumentBytes; media past the bound is declared as an unavailable
// resource and recorded as a loss.
const DefaultMaxMediaBytes = 16 << 20

// Actors of the exported events.
const (
	// HostActor is the participant that makes the calls (and the outcomes
	// the host itself decided: refusals, synthetic failures).
	HostActor = "skulk-host"
	// ProviderActor is the participant that answered: the provider child.
	ProviderActor = "provider"
)

// BranchID is the id of the one branch an export has.
const BranchID = "main"

// Errors of Export, matched with errors.Is. Those about one event come
// wrapped in an *EventError.
var (
	// ErrNoEvents: no events were given.
	ErrNoEvents = errors.New("export: no events")
	// ErrEmptyWindow: no event falls in (After, Until].
	ErrEmptyWindow = errors.New("export: no event in the window")
	// ErrWindow: Until is set and not greater than After.
	ErrWindow = errors.New("export: until must be greater than after")
	// ErrMixedTrees: the events belong to more than one tree.
	ErrMixedTrees = errors.New("export: events of more than one tree")
	// ErrOrder: the events are not in strictly ascending Seq order.
	ErrOrder = errors.New("export: events not in ascending seq order")
)

// EventError is a refusal of one input event. It names the event by its Seq
// and never holds its content.
type EventError struct {
	// Seq is the refused event's number in its tree.
	Seq uint64
	// Err is ErrMixedTrees or ErrOrder.
	Err error
}

// Error names the event and the reason.
func (e *EventError) Error() string {
	return fmt.Sprintf("%v (event seq %d)", e.Err, e.Seq)
}

// Unwrap returns the reason.
func (e *EventError) Unwrap() error { return e.Err }

// Options configure Export. The zero value exports every event given, with
// unknown tool schemas.
type Options struct {
	// After starts the window: only events with Seq > After are exported
	// as local evidence. 0 exports from the first event. Earlier events,
	// when given, serve only to describe what the window refers to (the
	// descriptor of an external binding, the predecessor of an amended
	// call, the numbering of results and stream segments); they are never
	// exported as events of their own.
	After uint64
	// Until ends the window: events with Seq > Until are ignored, as if the
	// capture had been made when the journal ended there. 0 means no end.
	Until uint64
	// Tools are the tools' descriptors (a child's hello, or the output of
	// skulk-host tools --json). A tool with no descriptor here is defined
	// with an unknown input schema (true), and the loss is recorded.
	Tools []wire.Tool
	// ProducerName names the software in capture.producer; empty means
	// "skulk-host", version "1".
	ProducerName string
	// ProducerVersion is the producer's version, used when ProducerName
	// is set.
	ProducerVersion string
	// MaxMediaBytes bounds the inline media bytes embedded; 0 means
	// DefaultMaxMediaBytes, a negative value embeds none.
	MaxMediaBytes int64
}

// SessionID is the ASIF session id of tree: every capture of one tree
// belongs to the same session.
func SessionID(tree string) string { return "skulk-tree-" + tree }

// CaptureID is the ASIF capture id of the window of tree's journal holding
// the events first..last.
func CaptureID(tree string, first, last uint64) string {
	return "tree-" + tree + "-seq-" + strconv.FormatUint(first, 10) + "-" + strconv.FormatUint(last, 10)
}

// Session is one exported ASIF session document.
type Session struct {
	// JSON is the document: indented JSON ending in a newline, which
	// asif.Check accepts without refusal.
	JSON []byte
	// CaptureID is the document's capture id: CaptureID of the tree and
	// the window's first and last journal seq.
	CaptureID string
	// Events, Streams, ExternalBindings and Losses count the document's
	// records of each kind.
	Events, Streams, ExternalBindings, Losses int
	// LossKinds are the kinds of the document's losses, in its order
	// (content_not_kept, media_not_embedded, …): what the document does
	// not hold of the call tree, each kind's explanation in the document.
	LossKinds []string
}

// Export turns the events of one call tree, in Seq order as a journal gives
// them (calllog.EventStore.EventsAfter from 0), into an ASIF 0.5 session
// document of the window (opts.After, opts.Until], and checks it with
// asif.Check before returning it.
//
// Content is exported only when the journal kept it (calllog.Options.FullContent);
// what it did not keep is declared unavailable and recorded as a loss.
//
// Errors: ErrNoEvents, ErrWindow, ErrEmptyWindow, an *EventError; a
// *asif.ReadError wrapping asif.ErrTooLarge or asif.ErrTooManyValues when
// the window does not fit in one document (export smaller windows); any
// other asif.Check refusal means the exporter wrote an invalid document,
// which is a bug.
func Export(events []calllog.Event, opts Options) (*Session, error) {
	doc, err := exportDocument(events, opts)
	if err != nil {
		return nil, err
	}
	data, err := doc.Marshal()
	if err != nil {
		return nil, err
	}
	return &Session{
		JSON:             data,
		CaptureID:        doc.Capture.ID,
		Events:           len(doc.Events),
		Streams:          len(doc.Streams),
		ExternalBindings: len(doc.ExternalBindings),
		Losses:           len(doc.Losses),
		LossKinds:        lossKinds(doc.Losses),
	}, nil
}

func lossKinds(ls []asifdoc.Loss) []string {
	kinds := make([]string, len(ls))
	for i, l := range ls {
		kinds[i] = l.Kind
	}
	return kinds
}

// exportDocument is Export before marshalling: the document model, which
// the package's tests inspect.
func exportDocument(events []calllog.Event, opts Options) (*asifdoc.Document, error) {
	if len(events) == 0 {
		return nil, ErrNoEvents
	}
	if opts.Until != 0 && opts.Until <= opts.After {
		return nil, ErrWindow
	}
	tree := events[0].Tree
	var last uint64
	for i, e := range events {
		if e.Tree != tree {
			return nil, &EventError{Seq: e.Seq, Err: ErrMixedTrees}
		}
		if i > 0 && e.Seq <= last {
			return nil, &EventError{Seq: e.Seq, Err: ErrOrder}
		}
		last = e.Seq
	}
	return build(tree, itemsOf(events), opts)
}

// item is one journal event as the exporter reads it. An arguments
// fragment (docs/events.md, kind "arguments") has frag set.
type item struct {
	e        calllog.Event
	frag     *fragment
	streamed bool // started: the call's arguments arrive as fragments
}

// fragment is one fragment of a call's streamed arguments.
type fragment struct {
	index int
	text  string
	kept  bool // the journal kept the text (FullContent)
}

// itemsOf reads calllog events: an arguments event is a fragment, a
// started event says whether the call's arguments are streamed.
func itemsOf(events []calllog.Event) []item {
	items := make([]item, len(events))
	for i, e := range events {
		items[i] = item{e: e, streamed: e.Kind == calllog.KindStarted && e.ArgumentsStreamed}
		if e.Kind == calllog.KindArguments {
			// An empty fragment is known even when its text was not kept.
			kept := e.FragmentKept || e.FragmentBytes == 0
			items[i].frag = &fragment{index: e.FragmentIndex, text: e.Fragment, kept: kept}
		}
	}
	return items
}

// call is what the exporter knows of one call, from all the events given
// (before the window too), and what it has put in the document.
type call struct {
	id, tool, version string
	program           bool
	started           bool // its started event was given
	startedSeq        uint64
	startedAt         time.Time
	args              json.RawMessage // nil: unknown
	argsStatus        asif.ArgumentsStatus
	streamed          bool
	traceID, spanID   string // the call's span, from its events; "" for none
	frags             []fragItem
	requestSeq        uint64 // streamed: the request that completed the arguments
	ended             bool
	unknown           bool // ended by a takeover that did not know its outcome (calllog.KindUnknown)
	holed             bool // events may be lost since the attempt began, before its first text chunk
	nextResult        int64
	text              *textResult // the current attempt's text, nil before its first text chunk

	// Document state.
	shown    bool   // present in the document (local or bound)
	eventID  string // the selected local tool_call version; "" for a binding
	eventSeq uint64 // the journal seq that established it
	inputs   int    // caller frames in the window
}

type fragItem struct {
	seq uint64
	at  time.Time
	fragment
}

// textResult is the tool_result holding one attempt's streamed text.
type textResult struct {
	index   int64
	attempt int
	chunks  int64 // text chunks of the attempt so far (before the window too)
	data    *asifdoc.ToolResultData
	event   int // index in doc.Events (and in the branch's event ids)
	first   uint64
	last    uint64 // seqs of the first and last chunk in the window
	firstAt time.Time
	stream  int // index in doc.Streams
	text    strings.Builder
	window  bool // emitted in this document
}

type exporter struct {
	opts      Options
	tree      string
	doc       *asifdoc.Document
	session   string
	source    string // the capture holding events 1..After
	calls     map[string]*call
	order     []*call // calls shown, in order of appearance
	tools     map[string]*asifdoc.Tool
	toolOrder []string
	resources map[string]bool
	losses    []*asifdoc.Loss
	lossByID  map[string]*asifdoc.Loss
	mediaLeft int64
	// windowText[call][attempt] is true when the window holds a text chunk
	// of that attempt.
	windowText map[string]map[int]bool
	gaps       bool
	notKept    bool // some content was not kept (shape)
}

func build(tree string, items []item, opts Options) (*asifdoc.Document, error) {
	x := &exporter{
		opts: opts, tree: tree, calls: map[string]*call{}, tools: map[string]*asifdoc.Tool{},
		resources: map[string]bool{}, lossByID: map[string]*asifdoc.Loss{}, windowText: map[string]map[int]bool{},
		session: SessionID(tree), source: CaptureID(tree, 1, opts.After),
	}
	x.mediaLeft = opts.MaxMediaBytes
	if x.mediaLeft == 0 {
		x.mediaLeft = DefaultMaxMediaBytes
	}
	if opts.Until != 0 {
		// Events past Until are ignored, as if the journal ended there.
		if i := slices.IndexFunc(items, func(it item) bool { return it.e.Seq > opts.Until }); i >= 0 {
			items = items[:i]
		}
	}
	var window []item
	for _, it := range items {
		if it.e.Seq > opts.After {
			window = append(window, it)
			if it.e.Kind == calllog.KindOutput && isText(it.e) {
				m := x.windowText[it.e.Call]
				if m == nil {
					m = map[int]bool{}
					x.windowText[it.e.Call] = m
				}
				m[it.e.Attempt] = true
			}
		}
	}
	if len(window) == 0 {
		return nil, ErrEmptyWindow
	}
	first, last := opts.After+1, window[len(window)-1].e.Seq
	producer := asifdoc.Producer{Name: opts.ProducerName, Version: opts.ProducerVersion}
	if producer.Name == "" {
		producer = asifdoc.Producer{Name: HostActor, Version: "1"}
	}
	x.doc = asifdoc.NewDocument(asifdoc.Capture{
		ID: CaptureID(tree, first, last), Producer: producer, Consistency: "consistent",
		StartedAt: stamp(window[0].e.At), EndedAt: stamp(window[len(window)-1].e.At),
	}, asifdoc.SessionInfo{ID: x.session, Title: "Skulk call tree " + tree})
	if opts.After > 0 {
		x.doc.Session.Lineage = []asifdoc.Lineage{{Relation: "continuation", SessionID: x.session, CaptureID: x.source}}
	}
	x.doc.Participants = []asifdoc.Participant{
		{ID: HostActor, Kind: "service", Name: "Skulk host (makes the calls)"},
		{ID: ProviderActor, Kind: "tool", Name: "Skulk provider child (answers them)"},
	}

	prev := uint64(0)
	for _, it := range items {
		in := it.e.Seq > opts.After
		want := prev + 1
		if prev == 0 && in {
			want = opts.After + 1
		}
		if it.e.Seq > want {
			x.hole()
			if in {
				x.gaps = true
				x.loss("events-not-kept", "capture", "events_not_kept", asifdoc.ScopeNative, nil,
					"The journal did not keep some events of the window (its seq numbering has gaps): what they recorded is not in this capture, and the text streams of calls running across a gap are partial.")
			}
		}
		prev = it.e.Seq
		x.step(it, in)
	}
	x.finish()
	x.describe(first, last)
	return x.doc, nil
}

// hole accounts for events the journal numbered but did not keep: any of
// them may have been a text chunk of a running call, so every running
// call's text gets a missing segment index there, and its stream can only
// be partial. Nothing is guessed about what was lost.
func (x *exporter) hole() {
	for _, c := range x.calls {
		switch {
		case c.ended || c.program:
		case c.text != nil:
			c.text.chunks++
		default:
			c.holed = true
		}
	}
}

// step applies one event; in says whether it is in the window.
func (x *exporter) step(it item, in bool) {
	e := it.e
	c := x.calls[e.Call]
	if c == nil {
		c = &call{id: e.Call, tool: e.Tool, program: e.Program}
		x.calls[e.Call] = c
	}
	if e.ToolVersion != "" {
		c.version = e.ToolVersion
	}
	if e.TraceID != "" {
		c.traceID, c.spanID = e.TraceID, e.SpanID
	}
	if c.program || e.Program {
		c.program = true
		if e.Kind.IsEnd() {
			c.ended = true // the tree's end when it is the outermost call
		}
		if in {
			x.loss("programs", "translation", "program_not_represented", asifdoc.ScopeExecutions, nil,
				"A program (Go code whose steps are calls) is not a tool call: it has no event here, and its steps are exported as calls of their own without the link to it.")
		}
		return
	}
	if e.Kind == calllog.KindStarted && it.frag == nil {
		c.started, c.startedSeq, c.startedAt, c.streamed = true, e.Seq, e.At, it.streamed
		if !it.streamed {
			c.args, c.argsStatus = argsOf(e.Payload)
		} else {
			c.argsStatus = asif.ArgumentsPartial
		}
		if in && e.Payload != nil && e.Payload.Redacted {
			x.redacted("call", c.id)
		}
		if in {
			c.shown = true
			x.order = append(x.order, c)
			x.useTool(c)
			if !c.streamed {
				x.emitCall(c, e.Seq, e.At, c.args, c.argsStatus)
			}
		}
		return
	}
	if in && !c.shown {
		if !x.show(c, e) {
			return
		}
	}
	switch {
	case it.frag != nil:
		c.frags = append(c.frags, fragItem{seq: e.Seq, at: e.At, fragment: *it.frag})
		if in && !it.frag.kept {
			x.notKept = true
		}
	case e.Kind == calllog.KindRequest:
		x.void(c, in)
		c.holed = false
		if c.streamed && c.requestSeq == 0 {
			c.requestSeq = e.Seq
			c.args, c.argsStatus = streamedArgs(c.frags, e.Payload)
			if in {
				x.emitComplete(c, e)
			}
		}
	case e.Kind == calllog.KindInput:
		if in {
			c.inputs++
		}
	case e.Kind == calllog.KindOutput:
		x.output(c, e, in)
	case e.Kind == calllog.KindRetry:
		x.void(c, in)
	case e.Kind.IsEnd():
		x.end(c, e, in)
	}
}

// show puts a call that began before the window into the document at its
// first event in the window: its authentic partial version when its
// arguments were still streaming (so that the window may amend it), an
// external binding otherwise. It reports false for a call whose start was
// not given (nothing can be said about it).
func (x *exporter) show(c *call, e calllog.Event) bool {
	if !c.started {
		x.loss("start-not-given", "capture", "call_start_missing", "", []asifdoc.LossReference{{Type: "call", ID: c.id}},
			"Events of this call are in the window but its start was not given to the exporter: its events are not exported.")
		return false
	}
	c.shown = true
	x.order = append(x.order, c)
	x.useTool(c)
	if c.streamed && c.requestSeq == 0 {
		x.emitPartial(c, c.startedAt)
	} else {
		src := "call-" + seqStr(c.startedSeq)
		if c.streamed {
			src = "call-" + seqStr(c.requestSeq)
		}
		x.doc.AddExternalBinding(asifdoc.ExternalBinding{
			Kind: "call", ID: c.id,
			Source:     asif.BindingSource{SessionID: x.session, CaptureID: x.source, EventID: src},
			Descriptor: &asifdoc.CallDescriptor{ToolID: c.tool, Arguments: c.args, ArgumentsStatus: c.argsStatus},
		})
		x.loss("calls-before-window", "capture", "history_before_capture", asifdoc.ScopeConversation, nil,
			"Calls that began before this capture's first event are external bindings naming their tool_call in the earlier capture; their requests and earlier results are not included here.")
	}
	// A text result that began before the window and goes on in it comes
	// first, so that result indexes stay in order.
	if t := c.text; t != nil && x.windowText[c.id][t.attempt] {
		x.emitText(c, e)
	}
	return true
}

// argsOf returns a started or request event's arguments and their status.
func argsOf(p *calllog.Content) (json.RawMessage, asif.ArgumentsStatus) {
	switch {
	case p == nil:
		return json.RawMessage("{}"), asif.ArgumentsComplete
	case p.Value == nil:
		return nil, asif.ArgumentsUnknown
	}
	b, err := p.Value.MarshalJSON()
	if err != nil {
		return nil, asif.ArgumentsUnknown
	}
	return b, asif.ArgumentsComplete
}

// streamedArgs returns a streamed call's arguments once its request came:
// the fragments' assembled JSON text — the arguments as the caller gave
// them, before the host filled in schema defaults, as for any call's
// started event — when every fragment was kept and they form one strict
// JSON object; otherwise the request's arguments (defaults filled in).
func streamedArgs(frags []fragItem, request *calllog.Content) (json.RawMessage, asif.ArgumentsStatus) {
	if n := len(frags); n > 0 && keptPrefix(frags) == n {
		var b bytes.Buffer
		for _, f := range frags {
			b.WriteString(f.text)
		}
		if v, err := strictjson.Parse(b.Bytes()); err == nil {
			if _, isObject := v.(map[string]any); isObject {
				var c bytes.Buffer
				if json.Compact(&c, b.Bytes()) == nil {
					return c.Bytes(), asif.ArgumentsComplete
				}
			}
		}
	}
	return argsOf(request)
}

// keptPrefix returns how many fragments, from the first, the journal kept
// with their text and in index order.
func keptPrefix(frags []fragItem) int {
	for i, f := range frags {
		if !f.kept || f.index != i {
			return i
		}
	}
	return len(frags)
}

// emitCall adds a tool_call version established by the journal event seq.
// A version that amends the document's current one (supersedes it) is
// named call-SEQ-amends-PRED, a first version call-SEQ: the amendment is
// part of the event, so one id never names two different events in two
// captures. Unknown (nil) arguments are written as null by
// asifdoc.ToolCallData. It returns the id.
func (x *exporter) emitCall(c *call, seq uint64, at time.Time, args json.RawMessage, status asif.ArgumentsStatus) string {
	if args == nil {
		x.notKept = true
	}
	id := "call-" + seqStr(seq)
	var causes []asifdoc.EventRef
	var sup *asifdoc.EventRef
	if c.eventID != "" {
		id += "-amends-" + seqStr(c.eventSeq)
		sup = &asifdoc.EventRef{EventID: c.eventID}
		causes = []asifdoc.EventRef{*sup}
	}
	x.doc.AddEvent(BranchID, asifdoc.Event{
		ID: id, ActorID: HostActor, Kind: asifdoc.EventToolCall, Time: stamp(at),
		Causes: causes, Supersedes: sup, Provenance: observed(),
		Data:       &asifdoc.ToolCallData{CallID: c.id, ToolID: c.tool, Arguments: args, ArgumentsStatus: status},
		Extensions: traceExtension(c),
	})
	c.eventID, c.eventSeq = id, seq
	return id
}

// traceKey is the key of a tool_call event's extensions that names
// the call's OpenTelemetry span, when its events carry one (docs/asif.md).
const traceKey = "skulk/trace"

// traceExtension returns the extensions of c's tool_call events: its
// trace and span ids, or nil when its events named none.
func traceExtension(c *call) map[string]any {
	if c.traceID == "" {
		return nil
	}
	return map[string]any{traceKey: map[string]string{"trace_id": c.traceID, "span_id": c.spanID}}
}

// emitPartial adds (or amends) the partial version of a streamed call,
// bound to a partial tool_arguments stream of the fragments seen so far.
// The version is established by its last fragment's event (the call's
// start when none), so every capture that saw the same fragments writes
// the very same event.
func (x *exporter) emitPartial(c *call, at time.Time) {
	seq := c.startedSeq
	if n := len(c.frags); n > 0 {
		seq, at = c.frags[n-1].seq, c.frags[n-1].at
	}
	if c.eventID != "" && seq == c.eventSeq {
		return
	}
	id := x.emitCall(c, seq, at, json.RawMessage("{}"), asif.ArgumentsPartial)
	x.argsStream(c, id, false)
}

// emitComplete adds the complete version of a streamed call at its
// request, amending the partial version when the document holds one.
func (x *exporter) emitComplete(c *call, e calllog.Event) {
	id := x.emitCall(c, e.Seq, e.At, c.args, c.argsStatus)
	if c.argsStatus == asif.ArgumentsComplete {
		x.argsStream(c, id, true)
	}
}

// argsStream binds a tool_arguments stream over the call's fragments to
// the version eventID. A complete stream is written only when every
// fragment was kept and they assemble to the call's arguments; otherwise
// the loss is recorded and the complete version has no stream.
func (x *exporter) argsStream(c *call, eventID string, complete bool) {
	var segs []asifdoc.Segment
	var all strings.Builder
	n := keptPrefix(c.frags)
	ok := n == len(c.frags)
	for i, f := range c.frags[:n] {
		rid := "fragment-" + seqStr(f.seq)
		x.resource(textOrData(rid, "application/json", "native", f.text))
		segs = append(segs, asifdoc.Segment{Index: int64(i), ResourceID: rid, Length: int64(len(f.text))})
		all.WriteString(f.text)
	}
	if complete {
		if ok && len(segs) > 0 {
			v, err := strictjson.Parse([]byte(all.String()))
			w, err2 := strictjson.Parse(c.args)
			ok = err == nil && err2 == nil && strictjson.Equal(v, w)
		}
		if !ok || len(segs) == 0 {
			x.loss("fragments-"+eventID, "capture", "argument_fragments_incomplete", "", []asifdoc.LossReference{{Type: "event", ID: eventID}},
				"The journal does not hold every fragment of these arguments as the call received them (or they do not assemble to its arguments), so the complete call has no tool_arguments stream.")
			return
		}
		segs[len(segs)-1].Terminal = true
	}
	status := asif.StreamPartial
	if complete {
		status = asif.StreamComplete
	}
	x.doc.AddStream(asifdoc.Stream{ID: "arguments-" + eventID, Kind: asif.StreamToolArguments, EventID: eventID, CallID: c.id, Status: status, Segments: segs})
	if !ok {
		x.loss("fragments-"+eventID, "capture", "argument_fragments_incomplete", "", []asifdoc.LossReference{{Type: "stream", ID: "arguments-" + eventID}},
			"The journal does not hold every fragment of these arguments: the stream holds the contiguous prefix it kept.")
	}
}

// isText reports whether an output event carries text (a "text" string in
// its kept payload).
func isText(e calllog.Event) bool {
	if e.Payload == nil || e.Payload.Value == nil {
		return false
	}
	_, ok := e.Payload.Value.Text()
	return ok
}

// pureText reports whether an output event is text and nothing else: a
// payload of exactly {"text": s} and no media.
func pureText(e calllog.Event) bool {
	return isText(e) && e.Payload.Keys == 1 && e.Media == nil
}

func (x *exporter) output(c *call, e calllog.Event, in bool) {
	if isText(e) {
		s, _ := e.Payload.Value.Text()
		if c.text == nil || c.text.attempt != e.Attempt {
			c.text = &textResult{index: c.nextResult, attempt: e.Attempt, stream: -1}
			c.nextResult++
			if c.holed { // the attempt's first chunks may be lost
				c.text.chunks, c.holed = 1, false
			}
		}
		t := c.text
		if in {
			if !t.window {
				x.emitText(c, e)
			}
			if t.first == 0 {
				t.first, t.firstAt = e.Seq, e.At
			}
			t.last = e.Seq
			rid := "chunk-" + seqStr(e.Seq) + "-text"
			x.resource(textOrData(rid, "text/plain; charset=utf-8", "tool_output", s))
			st := &x.doc.Streams[t.stream]
			st.Segments = append(st.Segments, asifdoc.Segment{Index: t.chunks, ResourceID: rid, Length: int64(len(s))})
			t.text.WriteString(s)
		}
		t.chunks++
	}
	if pureText(e) {
		return
	}
	idx := c.nextResult
	c.nextResult++
	if !in {
		return
	}
	var parts []asifdoc.Part
	base := "chunk-" + seqStr(e.Seq)
	if e.Payload != nil && !(isText(e) && e.Payload.Keys == 1) {
		parts = append(parts, asifdoc.ResourcePart(x.payloadResource(base+"-payload", e.Payload)))
	}
	if e.Media != nil {
		parts = append(parts, asifdoc.ResourcePart(x.mediaResource(base+"-media", e.Media)))
	}
	x.result("result-"+seqStr(e.Seq), e.At, ProviderActor, &asifdoc.ToolResultData{
		CallID: c.id, ResultIndex: idx, Outcome: asif.OutcomeUnknown, Parts: parts,
	}, observed())
}

// emitText adds the tool_result of the current attempt's text, with its
// tool_result_text stream; both fill up as chunks come, and closeText names
// them after the chunks they hold.
func (x *exporter) emitText(c *call, e calllog.Event) {
	t := c.text
	t.window = true
	t.data = &asifdoc.ToolResultData{CallID: c.id, ResultIndex: t.index, Outcome: asif.OutcomeUnknown}
	id := "text-" + seqStr(e.Seq)
	t.event = len(x.doc.Events)
	x.result(id, e.At, ProviderActor, t.data, observed())
	idx := t.index
	x.doc.AddStream(asifdoc.Stream{ID: id, Kind: asif.StreamToolResultText, EventID: id, CallID: c.id, ResultIndex: &idx, Status: asif.StreamPartial})
	t.stream = len(x.doc.Streams) - 1
	if t.chunks > 0 {
		x.loss("text-before-window", "capture", "history_before_capture", "", nil,
			"Text chunks of an attempt that began before this capture are not included: its text stream is partial (its first segments are missing) and its result holds only the text seen in the window.")
		x.lossRef("text-before-window", "stream", id)
	}
}

// closeText settles the current attempt's text result: terminal segment
// when ended says the text is whole, and the result's single text part.
func (x *exporter) closeText(c *call, ended bool) {
	t := c.text
	if t == nil || !t.window {
		return
	}
	st := &x.doc.Streams[t.stream]
	if ended && len(st.Segments) > 0 {
		st.Segments[len(st.Segments)-1].Terminal = true
		if st.Segments[0].Index == 0 && int64(len(st.Segments)) == t.chunks {
			st.Status = asif.StreamComplete
		}
	}
	// The result's single text part is the text so far; when the window
	// missed the attempt's first chunks, the text is not known, and only
	// the stream's later segments say what was seen.
	if len(st.Segments) == 0 || st.Segments[0].Index == 0 {
		t.data.Parts = []asifdoc.Part{asifdoc.TextPart(t.text.String())}
	}
	t.window = false
	// The result's id names the chunks it holds (text-FIRST-LAST, with
	// -open when its end was not seen), so that two captures never give one
	// id to different evidence.
	old := x.doc.Events[t.event].ID
	id := old
	if t.first != 0 {
		id = "text-" + seqStr(t.first) + "-" + seqStr(t.last)
		if !ended { // cut or voided: a capture that saw the end differs
			id += "-open"
		}
		x.doc.Events[t.event].Time = stamp(t.firstAt) // the event's time is its first chunk's
	}
	x.doc.Events[t.event].ID = id
	for i := range x.doc.Branches {
		b := &x.doc.Branches[i]
		for j := range b.EventIDs {
			if b.EventIDs[j] == old {
				b.EventIDs[j] = id
			}
		}
		if b.HeadEventID != nil && *b.HeadEventID == old {
			b.HeadEventID = &id
		}
	}
	st.ID, st.EventID = id, id
	for _, l := range x.losses {
		for j := range l.References {
			if l.References[j].ID == old {
				l.References[j].ID = id
			}
		}
	}
}

// void ends the current attempt's text: a request or retry voids what the
// caller was shown.
func (x *exporter) void(c *call, in bool) {
	if c.text == nil {
		return
	}
	if in && c.text.window {
		x.loss("voided-attempts", "translation", "voided_attempt", "", nil,
			"An attempt's output was voided by a retry (the caller's text restarted): its text stream stays partial and its results are kept as observed; ASIF has no notion of a voided result.")
		x.lossRef("voided-attempts", "stream", x.doc.Streams[c.text.stream].ID)
	}
	x.closeText(c, false)
	c.text = nil
}

func (x *exporter) end(c *call, e calllog.Event, in bool) {
	c.ended = true
	if e.Kind == calllog.KindUnknown {
		// No terminal result: the journal does not say how the call ended.
		// The checkpoint lists it as outcome_unknown.
		c.unknown = true
		if in {
			if c.streamed && c.requestSeq == 0 {
				x.emitPartial(c, e.At)
			}
			x.closeText(c, false)
			x.loss("outcome-unknown", "capture", "outcome_unknown", "", nil,
				"The journal kept no end of these calls: a writer that took the tree over recorded that their outcome is unknown. They have no terminal result; the checkpoint lists them as outcome_unknown.")
			x.lossRef("outcome-unknown", "call", c.id)
		}
		return
	}
	if !in {
		return
	}
	if c.streamed && c.requestSeq == 0 {
		x.emitPartial(c, e.At)
	}
	x.closeText(c, true)
	idx := c.nextResult
	c.nextResult++
	d := &asifdoc.ToolResultData{CallID: c.id, ResultIndex: idx, Terminal: true}
	base := "result-" + seqStr(e.Seq)
	switch e.Kind {
	case calllog.KindCompleted:
		d.Outcome = asif.OutcomeSuccess
		if e.Payload != nil {
			d.Parts = []asifdoc.Part{asifdoc.ResourcePart(x.payloadResource(base+"-value", e.Payload))}
		}
	case calllog.KindFailed:
		d.Outcome = asif.OutcomeError
	default:
		d.Outcome = asif.OutcomeCancelled
	}
	if e.Error != nil {
		d.Parts = append(d.Parts, asifdoc.ResourcePart(x.errorResource(base+"-error", e.Error, e.Refused)))
	}
	actor, prov := ProviderActor, observed()
	switch {
	case e.Error != nil && e.Error.Synthetic:
		actor = HostActor
		prov = asifdoc.Provenance{Mode: "synthetic", Producer: HostActor,
			Method: "outcome made up by the host in place of the provider (the child crashed, timed out or broke the protocol), or by a writer that took the journal over"}
		x.loss("synthetic-outcomes", "capture", "synthetic_outcome", "", nil,
			"These terminal results were not answered by the provider: the host recorded them in its place (provenance synthetic). The provider's real outcome is unknown.")
		x.lossRef("synthetic-outcomes", "event", base)
	case e.Refused != "":
		actor = HostActor
	}
	x.result(base, e.At, actor, d, prov)
}

// result adds a tool_result. Its call_id is what ties it to its call (a
// local version or an external binding): it names no cause, because the
// selected call version differs between captures (standalone, amended,
// bound) and a result's event must be the same in every capture.
func (x *exporter) result(id string, at time.Time, actor string, d *asifdoc.ToolResultData, prov asifdoc.Provenance) {
	x.doc.AddEvent(BranchID, asifdoc.Event{
		ID: id, ActorID: actor, Kind: asifdoc.EventToolResult, Time: stamp(at), Provenance: prov, Data: d,
	})
}

// finish settles what the window leaves open: streamed arguments still
// incomplete and text still streaming.
func (x *exporter) finish() {
	for _, c := range x.order {
		if c.ended {
			continue
		}
		if c.streamed && c.requestSeq == 0 {
			x.emitPartial(c, c.startedAt)
		}
		x.closeText(c, false)
	}
}

func (x *exporter) useTool(c *call) {
	t := x.tools[c.tool]
	if t == nil {
		t = &asifdoc.Tool{ID: c.tool, Name: c.tool}
		for _, d := range x.opts.Tools {
			if d.ID == c.tool {
				t.Description = d.Description
				t.InputSchema = schemaJSON(d.ArgumentsSchema)
				if d.Version != "" {
					t.Revision = d.Version
				}
				break
			}
		}
		if t.InputSchema == nil {
			t.Description = "Skulk tool " + c.tool + " (its descriptor was not given to the exporter)."
			x.loss("tool-definitions", "capture", "tool_definition_incomplete", "", nil,
				"The journal records tool ids and versions, not their descriptors: these tools are defined with an unknown input schema (true).")
			x.lossRef("tool-definitions", "tool", c.tool)
		}
		x.tools[c.tool] = t
		x.toolOrder = append(x.toolOrder, c.tool)
	}
	if t.Revision == "" && c.version != "" {
		t.Revision = c.version
	}
}

// schemaJSON returns a tool schema as JSON; nil (any object) is
// {"type":"object"}.
func schemaJSON(s map[string]any) json.RawMessage {
	if s == nil {
		return json.RawMessage(`{"type":"object"}`)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil
	}
	return b
}

func (x *exporter) resource(r asifdoc.Resource) {
	if x.resources[r.ID] {
		return
	}
	x.resources[r.ID] = true
	x.doc.Resources = append(x.doc.Resources, r)
}

// redacted records that the object typ id holds values the host redacted.
func (x *exporter) redacted(typ, id string) {
	x.loss("redacted", "capture", "content_redacted", "", nil,
		"The host redacted these payloads before keeping them (calllog.Options.Redact): the value of each key it names is the string \"[redacted]\" here, not what the call had.")
	x.lossRef("redacted", typ, id)
}

func (x *exporter) payloadResource(id string, p *calllog.Content) string {
	if p.Redacted {
		x.redacted("resource", id)
	}
	if p.Value == nil && p.ValueDropped {
		x.notKept = true
		x.resource(asifdoc.Resource{ID: id, MediaType: "application/json", Availability: "unavailable", Purpose: "tool_output",
			Explanation: "The journal's queue had no room for this value when it was recorded: it kept the event with the payload's shape only."})
		return id
	}
	if p.Value == nil {
		x.notKept = true
		x.resource(asifdoc.Resource{ID: id, MediaType: "application/json", Availability: "unavailable", Purpose: "tool_output",
			Explanation: "The journal kept only this payload's shape (type and size), not its content."})
		return id
	}
	b, err := p.Value.MarshalJSON()
	if err != nil {
		x.resource(asifdoc.Resource{ID: id, MediaType: "application/json", Availability: "unknown", Purpose: "tool_output",
			Explanation: "The payload kept has no JSON form."})
		return id
	}
	x.resource(asifdoc.TextResource(id, "application/json", "tool_output", string(b)))
	return id
}

func (x *exporter) errorResource(id string, e *frame.Error, refused string) string {
	m := map[string]any{"code": e.Code.String(), "message": e.Message, "synthetic": e.Synthetic}
	if refused != "" {
		m["refused"] = refused
	}
	b, _ := json.Marshal(m) // strings and a bool: cannot fail
	x.resource(asifdoc.TextResource(id, "application/json", "tool_error", string(b)))
	return id
}

func (x *exporter) mediaResource(id string, m *calllog.MediaInfo) string {
	mt := m.MediaType
	if mt == "" {
		mt = "application/octet-stream"
	}
	switch {
	case m.Kind == "blob" && m.BlobID != "":
		size := m.Bytes
		x.resource(asifdoc.Resource{ID: id, MediaType: mt, Availability: "external", Purpose: "tool_output",
			Bytes: &size, Locator: "skulk-blob:" + m.BlobID,
			Explanation: "A blob the provider referenced by id and SHA-256 (" + m.SHA256 + "); its bytes are not in the journal."})
		x.loss("blobs", "capture", "media_not_embedded", "", nil, "Blob media is referenced by id, not embedded: the journal does not hold its bytes.")
		x.lossRef("blobs", "resource", id)
	case m.Kind == "inline" && m.Data != nil && int64(len(m.Data)) <= x.mediaLeft:
		x.mediaLeft -= int64(len(m.Data))
		x.resource(asifdoc.DataResource(id, mt, "tool_output", m.Data))
	case m.Kind == "inline" && m.Data != nil:
		size := m.Bytes
		x.resource(asifdoc.Resource{ID: id, MediaType: mt, Availability: "excluded", Purpose: "tool_output", Bytes: &size,
			Explanation: "Inline media past the exporter's bound on embedded media bytes."})
		x.loss("media-excluded", "capture", "media_not_embedded", "", nil,
			"Inline media past the exporter's bound (MaxMediaBytes) is declared but not embedded.")
		x.lossRef("media-excluded", "resource", id)
	default:
		x.notKept = true
		size := m.Bytes
		x.resource(asifdoc.Resource{ID: id, MediaType: mt, Availability: "unavailable", Purpose: "tool_output", Bytes: &size,
			Explanation: "The journal kept only this media's kind, type and size."})
	}
	return id
}

// textOrData returns an embedded resource of s: text when it is UTF-8,
// base64 data otherwise (a fragment may split a UTF-8 sequence).
func textOrData(id, mediaType, purpose, s string) asifdoc.Resource {
	if utf8.ValidString(s) {
		return asifdoc.TextResource(id, mediaType, purpose, s)
	}
	return asifdoc.DataResource(id, mediaType, purpose, []byte(s))
}

// loss records the loss loss-ID the first time it is met, and adds refs
// to it every time.
func (x *exporter) loss(id, stage, kind string, scope asifdoc.CoverageScope, refs []asifdoc.LossReference, why string) {
	id = "loss-" + id
	l := x.lossByID[id]
	if l == nil {
		l = &asifdoc.Loss{ID: id, Stage: stage, Kind: kind, Scope: scope, Explanation: why}
		x.lossByID[id] = l
		x.losses = append(x.losses, l)
	}
	for _, r := range refs {
		addLossRef(l, r)
	}
}

// lossRef adds a reference to the loss loss-ID, if it was recorded.
func (x *exporter) lossRef(id, typ, ref string) {
	if l := x.lossByID["loss-"+id]; l != nil {
		addLossRef(l, asifdoc.LossReference{Type: typ, ID: ref})
	}
}

// addLossRef adds ref to l unless l already holds it.
func addLossRef(l *asifdoc.Loss, ref asifdoc.LossReference) {
	if !slices.Contains(l.References, ref) {
		l.References = append(l.References, ref)
	}
}

// describe writes the tools, checkpoint, coverage, boundary and losses.
func (x *exporter) describe(first, last uint64) {
	d := x.doc
	for _, id := range x.toolOrder {
		d.Tools = append(d.Tools, *x.tools[id])
	}
	var open []asifdoc.OpenCall
	inputs, unknown := 0, 0
	for _, c := range x.order {
		switch {
		case !c.ended:
			open = append(open, asifdoc.OpenCall{CallID: c.id, State: "pending"})
		case c.unknown:
			open = append(open, asifdoc.OpenCall{CallID: c.id, State: "outcome_unknown"})
			unknown++
		}
		if c.inputs > 0 {
			inputs += c.inputs
			x.loss("caller-input", "translation", "caller_input_not_represented", "", nil,
				"Caller frames (a call's input stream) have no ASIF tool event: they are not exported.")
			x.lossRef("caller-input", "call", c.id)
		}
	}
	if x.notKept {
		x.loss("content-not-kept", "capture", "content_not_kept", asifdoc.ScopeResources, nil,
			"The journal kept only the shape (type and size) of some payloads or media: their content is declared unavailable, and arguments it did not keep are unknown.")
	}
	x.loss("journal-native", "translation", "native_detail_not_represented", asifdoc.ScopeNative, nil,
		"Journal details with no ASIF field are not carried: the writer, the child each attempt ran on, attempt numbers, frame sequence numbers, the call a step was made in, and the tools' input, output and result schemas (input_schema is the arguments schema). Event ids carry the journal seq they come from (call-SEQ, result-SEQ, chunk-SEQ-…).")
	status := "active"
	if len(open) == 0 {
		status = "idle"
	}
	if root := x.calls[x.tree]; root != nil && root.ended && !slices.ContainsFunc(open, func(o asifdoc.OpenCall) bool { return o.State == "pending" }) {
		status = "ended"
	}
	var head *string
	if n := len(d.Events); n > 0 {
		h := d.Events[n-1].ID
		head = &h
	}
	d.Checkpoints = []asifdoc.Checkpoint{{ID: "checkpoint-" + strconv.FormatUint(last, 10), BranchID: BranchID, AtEventID: head,
		Knowledge: "derived", Status: status, OpenCalls: open}}
	if len(d.Events) == 0 {
		d.Branches = []asifdoc.Branch{{ID: BranchID}}
	}

	window := fmt.Sprintf("events %d to %d of the call journal of tree %s", first, last, x.tree)
	boundary := "Observed by the Skulk host: " + window + "."
	if first > 1 {
		boundary += fmt.Sprintf(" Events 1 to %d are outside this capture (capture %s): calls begun there are external bindings, and results before event %d are not included.", first-1, x.source, first)
	}
	if x.gaps {
		boundary += " The journal did not keep some events of the window (gaps in its numbering)."
		d.Capture.Consistency = "partial"
	}
	if n := len(open) - unknown; n > 0 {
		boundary += fmt.Sprintf(" %d call(s) had not ended at the capture's end.", n)
	}
	if unknown > 0 {
		boundary += fmt.Sprintf(" %d call(s) were ended by a takeover with their outcome unknown.", unknown)
	}
	d.Capture.Boundary = boundary

	part := asifdoc.CoverageComplete
	if first > 1 || x.gaps {
		part = asifdoc.CoveragePartial
	}
	d.SetCoverage(asifdoc.ScopeParticipants, asifdoc.CoverageComplete, "The host that made the calls and the provider children that answered them.")
	d.SetCoverage(asifdoc.ScopeConversation, part, "Every call and provider result of "+window+"; caller input frames are not represented (see losses).")
	d.SetCoverage(asifdoc.ScopeBranches, asifdoc.CoverageComplete, "A call journal is one linear history: one branch.")
	d.SetCoverage(asifdoc.ScopeExecutions, asifdoc.CoverageNotInspected, "Child processes and attempts are not exported as executions.")
	d.SetCoverage(asifdoc.ScopeContexts, asifdoc.CoverageNotApplicable, "Skulk calls are made by programs, not from a model context.")
	d.SetCoverage(asifdoc.ScopeConfiguration, asifdoc.CoverageNotInspected, "The host's configuration is not in the journal.")
	if x.lossByID["loss-tool-definitions"] != nil {
		d.SetCoverage(asifdoc.ScopeTools, asifdoc.CoveragePartial, "Every tool called is defined; some without their descriptor (see losses).")
	} else {
		d.SetCoverage(asifdoc.ScopeTools, asifdoc.CoverageComplete, "Every tool called, with the descriptor its child declared.")
	}
	d.SetCoverage(asifdoc.ScopeDecisions, asifdoc.CoverageNotApplicable, "Skulk calls involve no decision requests.")
	d.SetCoverage(asifdoc.ScopeTasks, asifdoc.CoverageNotApplicable, "Skulk calls involve no tasks.")
	if x.notKept || x.lossByID["loss-media-excluded"] != nil || x.lossByID["loss-blobs"] != nil {
		d.SetCoverage(asifdoc.ScopeResources, asifdoc.CoveragePartial, "Payloads, text, fragments and media the journal kept, within the media bound (see losses).")
	} else {
		d.SetCoverage(asifdoc.ScopeResources, asifdoc.CoverageComplete, "Every payload, text chunk, argument fragment and inline media of the window, embedded.")
	}
	d.SetCoverage(asifdoc.ScopeEnvironment, asifdoc.CoverageNotInspected, "The host's environment is not in the journal.")
	d.SetCoverage(asifdoc.ScopeNative, asifdoc.CoveragePartial, "Journal events are translated; their native form is not embedded (see losses).")
	d.SetCoverage(asifdoc.ScopeUsage, asifdoc.CoverageNotApplicable, "Skulk records no usage accounting.")
	for _, l := range x.losses {
		d.Losses = append(d.Losses, *l)
	}
}

func observed() asifdoc.Provenance {
	return asifdoc.Provenance{Mode: "observed", Producer: HostActor}
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func seqStr(s uint64) string { return strconv.FormatUint(s, 10) }
