package asif

import (
	"unicode/utf8"

	"github.com/skulkrt/skulk/internal/strictjson"
)

// StreamKind is a stream's kind (asif.streams/0.1).
type StreamKind string

// Stream kinds.
const (
	// StreamToolArguments assembles a tool_call's arguments as UTF-8 JSON.
	StreamToolArguments StreamKind = "tool_arguments"
	// StreamToolResultText assembles a tool_result's single text part.
	StreamToolResultText StreamKind = "tool_result_text"
)

// String returns the kind as written in documents, including unknown kinds.
func (k StreamKind) String() string { return string(k) }

// StreamStatus is a stream's assembly status.
type StreamStatus string

// Stream statuses.
const (
	// StreamComplete: indexes are contiguous from zero and the final
	// segment is terminal.
	StreamComplete StreamStatus = "complete"
	// StreamPartial: anything else, including an empty stream; only the
	// contiguous prefix from index zero is known.
	StreamPartial StreamStatus = "partial"
)

// String returns the status as written in documents.
func (s StreamStatus) String() string { return string(s) }

// Report is what Check established about a schema-valid document.
type Report struct {
	// Version is the document's asif_version (always Version).
	Version string `json:"asif_version"`
	// Streams describes every stream in document order.
	Streams []*Assembly `json:"streams"`
	// Branches holds, per branch in document order, the selected state of
	// every call in that branch's selected history.
	Branches []BranchState `json:"branches"`
	// Unchecked lists the rule families Check does not check (see
	// UncheckedFamilies) whose records the document holds; it is empty,
	// never nil, when there are none. A document is established valid only
	// when Check returns a nil error and Unchecked is empty.
	Unchecked []Family `json:"unchecked"`
}

// Valid reports whether a check that returned this report and err
// established the document as valid: no refusal, and no record of a rule
// family Check does not check. A nil report is never valid.
func (r *Report) Valid(err error) bool {
	return r != nil && err == nil && len(r.Unchecked) == 0
}

// Stream returns the assembly of the stream with the given id, or nil. When
// ids repeat (a refused document), the first is returned.
func (r *Report) Stream(id string) *Assembly {
	for _, a := range r.Streams {
		if a.StreamID == id {
			return a
		}
	}
	return nil
}

// Assembly is one stream assembled from its segments.
type Assembly struct {
	// StreamID is the stream's id.
	StreamID string `json:"id"`
	// Kind is tool_arguments or tool_result_text.
	Kind StreamKind `json:"kind"`
	// EventID and CallID name the bound event and invocation.
	EventID string `json:"event_id"`
	CallID  string `json:"call_id"`
	// ResultIndex is the bound result index of a tool_result_text stream.
	ResultIndex *int64 `json:"result_index,omitempty"`
	// Status is the status established by assembly (which Check requires
	// to equal the declared one).
	Status StreamStatus `json:"status"`
	// Declared is the status the document declares.
	Declared StreamStatus `json:"declared_status"`
	// Bytes is the contiguous prefix: segments with indexes 0, 1, 2, ...
	// concatenated up to the first missing index or faulty segment. It is
	// raw bytes; for a complete stream Check has verified it is UTF-8. It
	// aliases nothing in the input.
	Bytes []byte `json:"-"`
	// Size is len(Bytes).
	Size int `json:"assembled_bytes"`
	// Executable reports whether the stream is a complete tool_arguments
	// stream that assembles to exactly its bound call's arguments, and the
	// bound call's arguments_status is complete: the condition for using it
	// as an executable call. It is never an authorization to run anything.
	// A partial stream is never executable.
	Executable bool `json:"executable"`
}

type segment struct {
	pos      int
	index    int64
	resource string
	offset   int64
	length   int64
	terminal bool
}

// streams assembles and checks every stream (asif.streams/0.1).
func (c *checker) streams(root map[string]any) []*Assembly {
	out := []*Assembly{}
	seen := map[string]bool{}
	for _, s := range objects(root, "streams") {
		a := &Assembly{
			StreamID: str(s, "id"),
			Kind:     StreamKind(str(s, "kind")),
			EventID:  str(s, "event_id"),
			CallID:   str(s, "call_id"),
			Declared: StreamStatus(str(s, "status")),
			Status:   StreamPartial,
		}
		if has(s, "result_index") {
			ri := integer(s, "result_index")
			a.ResultIndex = &ri
		}
		out = append(out, a)
		if seen[a.StreamID] {
			c.refuse(RuleStreamDuplicateID, "stream", a.StreamID)
			continue
		}
		seen[a.StreamID] = true
		var segs []segment
		for i, g := range objects(s, "segments") {
			segs = append(segs, segment{
				pos:      i,
				index:    integer(g, "index"),
				resource: str(g, "resource_id"),
				offset:   integer(g, "offset"),
				length:   integer(g, "length"),
				terminal: boolean(g, "terminal"),
			})
		}
		c.assemble(a, segs)
		c.bind(a)
	}
	return out
}

// assemble checks the segments and concatenates the contiguous prefix.
func (c *checker) assemble(a *Assembly, segs []segment) {
	ordered := true
	terminals := 0
	for i, g := range segs {
		if g.index < 0 || (i > 0 && g.index <= segs[i-1].index) {
			c.refuseSegment(RuleSegmentIndexOrder, a.StreamID, g.pos)
			ordered = false
		}
		if g.terminal {
			terminals++
			if terminals == 2 {
				c.refuseSegment(RuleSegmentTerminalDuplicate, a.StreamID, g.pos)
			}
			if i != len(segs)-1 {
				c.refuseSegment(RuleSegmentTerminalNotLast, a.StreamID, g.pos)
			}
		}
	}
	// Every segment must select bytes of an intact embedded resource,
	// whether or not it is part of the contiguous prefix.
	usable := make([]bool, len(segs))
	for i, g := range segs {
		r := c.resources[g.resource]
		switch {
		case r == nil:
			c.refuseSegment(RuleSegmentResourceMissing, a.StreamID, g.pos)
		case r.availability != "embedded" || !r.verified:
			// Unverified embedded bytes were already refused under a
			// resource rule; they still cannot be assembled.
			if r.availability != "embedded" {
				c.refuseSegment(RuleSegmentResourceNotEmbedded, a.StreamID, g.pos)
			}
		case g.offset < 0 || g.length < 0 || g.offset > int64(len(r.content)) ||
			g.length > int64(len(r.content))-g.offset:
			c.refuseSegment(RuleSegmentSpan, a.StreamID, g.pos)
		default:
			usable[i] = true
		}
	}
	// The contiguous prefix: indexes 0, 1, 2, ... (the first segment with
	// each index, wherever it appears), up to the first missing index or
	// unusable segment.
	byIndex := make(map[int64]int, len(segs))
	for i, g := range segs {
		if _, dup := byIndex[g.index]; !dup {
			byIndex[g.index] = i
		}
	}
	var picked []segment
	var size int64
	for next := int64(0); ; next++ {
		i, ok := byIndex[next]
		if !ok || !usable[i] {
			break
		}
		picked = append(picked, segs[i])
		size += segs[i].length
	}
	if size > MaxStreamBytes || c.assembled+size > MaxAssembledBytes {
		c.refuse(RuleStreamTooLarge, "stream", a.StreamID)
		return
	}
	c.assembled += size
	buf := make([]byte, 0, size)
	for _, g := range picked {
		r := c.resources[g.resource]
		buf = append(buf, r.content[g.offset:g.offset+g.length]...)
	}
	a.Bytes, a.Size = buf, len(buf)
	complete := ordered && len(picked) == len(segs) && len(segs) > 0 &&
		terminals == 1 && segs[len(segs)-1].terminal
	if complete {
		a.Status = StreamComplete
	}
	if a.Status != a.Declared {
		c.refuse(RuleStreamStatus, "stream", a.StreamID)
	}
}

// bind checks a stream against its bound event. Decoding happens only here,
// after assembly, so fragments may split UTF-8 sequences.
func (c *checker) bind(a *Assembly) {
	e := c.events[a.EventID]
	if e == nil {
		c.refuse(RuleStreamEventMissing, "stream", a.StreamID)
		return
	}
	want := "tool_call"
	if a.Kind == StreamToolResultText {
		want = "tool_result"
	}
	if e.kind != want {
		c.refuse(RuleStreamEventKind, "stream", a.StreamID)
		return
	}
	if e.callID != a.CallID {
		c.refuse(RuleStreamCallMismatch, "stream", a.StreamID)
		return
	}
	if a.Kind == StreamToolResultText && (a.ResultIndex == nil || *a.ResultIndex != e.resultIndex) {
		c.refuse(RuleStreamResultIndexMismatch, "stream", a.StreamID)
		return
	}
	if a.Status != a.Declared {
		// Already refused (RuleStreamStatus); judging the bound call by a
		// status the stream does not have would only repeat that refusal.
		return
	}
	complete := a.Status == StreamComplete
	if a.Kind == StreamToolArguments && !complete {
		if e.argsStatus != "partial" {
			c.refuse(RuleStreamPartialCallStatus, "stream", a.StreamID)
		}
		return
	}
	if !complete {
		return
	}
	if !utf8.Valid(a.Bytes) {
		c.refuse(RuleStreamNotUTF8, "stream", a.StreamID)
		return
	}
	switch a.Kind {
	case StreamToolArguments:
		ok := true
		if e.argsStatus != "complete" {
			c.refuse(RuleStreamCompleteCallStatus, "stream", a.StreamID)
			ok = false
		}
		v, err := parseJSON(a.Bytes)
		if err != nil {
			c.refuse(RuleStreamArgumentsNotJSON, "stream", a.StreamID)
			return
		}
		if !strictjson.Equal(v, e.args) {
			c.refuse(RuleStreamArgumentsMismatch, "stream", a.StreamID)
			return
		}
		a.Executable = ok
	case StreamToolResultText:
		if len(e.parts) != 1 {
			c.refuse(RuleStreamTextMismatch, "stream", a.StreamID)
			return
		}
		p, _ := e.parts[0].(map[string]any)
		if str(p, "kind") != "text" || str(p, "text") != string(a.Bytes) {
			c.refuse(RuleStreamTextMismatch, "stream", a.StreamID)
		}
	}
}
