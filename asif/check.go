package asif

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"math"
	"strconv"
	"strings"
)

// Bounds on resource and stream bytes held while checking. Together with
// MaxDocumentBytes they bound a check's memory to a few hundred MiB.
const (
	// MaxResourceBytes is the largest path-backed resource file read
	// (64 MiB); text and data resources are already bounded by
	// MaxDocumentBytes.
	MaxResourceBytes = 64 << 20
	// MaxPathBytes is the largest total of path-backed resource bytes read
	// by one check (256 MiB).
	MaxPathBytes = 256 << 20
	// MaxStreamBytes is the largest assembled stream (64 MiB); a longer
	// contiguous prefix is refused with RuleStreamTooLarge.
	MaxStreamBytes = 64 << 20
	// MaxAssembledBytes is the largest total of assembled bytes over all
	// streams of one document (256 MiB). Segments may reuse a resource, so
	// without it a small document could assemble terabytes.
	MaxAssembledBytes = 256 << 20
)

// Feature identifiers this package interprets.
const (
	// FeatureStreams is the asif.streams/0.1 feature (root streams).
	FeatureStreams = "asif.streams/0.1"
	// FeatureExternalBindings is the asif.external-bindings/0.1 feature
	// (root external_bindings).
	FeatureExternalBindings = "asif.external-bindings/0.1"
)

// Options configure Check. The zero value is ready to use.
type Options struct {
	// Files is the session directory against which path-backed embedded
	// resources are resolved and verified. Use (*os.Root).FS() so that
	// symbolic links cannot leave the directory. Nil means the document
	// has no directory: every path-backed embedded resource is refused
	// with RuleResourcePath, because its integrity cannot be verified.
	Files fs.FS
}

// CheckReader reads a document from r with Read (bounded by
// MaxDocumentBytes) and checks it with Check.
func CheckReader(r io.Reader, opts Options) (*Report, error) {
	data, err := Read(r)
	if err != nil {
		return nil, err
	}
	return Check(data, opts)
}

// Check validates an ASIF 0.5 session document in three layers and returns
// what it could establish:
//
//  1. strict JSON (see Read): a *ReadError;
//  2. asif_version must be "0.5": a *VersionError;
//  3. the embedded JSON Schema: a *SchemaError;
//  4. the semantic rules the schema cannot express (resource integrity,
//     references, tool-call progression, tasks, streams, external
//     bindings): every refusal found, each a *RuleError, joined with errors.Join (at most
//     MaxRefusals of them, then one *TooManyRefusalsError).
//
// The report is nil when layers 1–3 refuse the document; otherwise it is
// non-nil even when rules are refused, and describes every stream and the
// selected state of every call as far as they could be established. A nil
// error means no checked rule refused the document; it is valid only when
// Report.Unchecked is also empty (Report.Valid). Check is safe to call
// concurrently.
func Check(data []byte, opts Options) (*Report, error) {
	tree, err := parseJSON(data)
	if err != nil {
		return nil, err
	}
	root, ok := tree.(map[string]any)
	if !ok {
		return nil, newVersionError(nil)
	}
	if v, _ := root["asif_version"].(string); v != Version {
		return nil, newVersionError(root["asif_version"])
	}
	if err := validateSchema(root); err != nil {
		return nil, err
	}
	c := &checker{opts: opts}
	report := c.run(root)
	return report, c.errors()
}

// checker holds one check's state; it is used by a single goroutine.
type checker struct {
	opts    Options
	errs    []error
	dropped int

	resources map[string]*resource
	events    map[string]*event
	eventList []*event
	tools     map[string]bool
	// calls maps a call_id to its first local tool_call version.
	calls map[string]*event
	// requests holds local decision_request ids.
	requests map[string]bool
	// callBindings maps a call binding's id to the binding.
	callBindings map[string]*binding
	bindings     []*binding
	branches     []branch

	// taskRevisions maps (task_id, revision) to its first task_update.
	taskRevisions map[taskKey]*event

	pathBytes int64
	assembled int64
}

type resource struct {
	id           string
	availability string
	content      []byte // verified decoded bytes, set only when embedded and intact
	verified     bool
}

type event struct {
	pos        int
	id         string
	seq        int64
	actor      string
	kind       string
	exec       string
	hasExec    bool
	supersedes *eventRef

	callID      string
	toolID      string
	argsStatus  string
	retryOf     string
	hasRetry    bool
	args        any
	resultIndex int64
	terminal    bool
	outcome     string
	parts       []any

	causes []string // local causes' event ids
	task   *task    // set for task_update

	superseded bool // some later local event supersedes this one
}

type eventRef struct {
	eventID  string
	external bool // names a session/capture: not local history
}

type binding struct {
	kind       string
	id         string
	source     BindingSource
	toolID     string
	args       any
	argsStatus string
}

type branch struct {
	id       string
	eventIDs []string
}

func (c *checker) refuse(rule Rule, object, id string) {
	c.add(&RuleError{Rule: rule, Object: object, ObjectID: id, Segment: -1})
}

func (c *checker) refuseSegment(rule Rule, streamID string, segment int) {
	c.add(&RuleError{Rule: rule, Object: "stream", ObjectID: streamID, Segment: segment})
}

// add keeps the first MaxRefusals refusals and counts the rest.
func (c *checker) add(e *RuleError) {
	if len(c.errs) < MaxRefusals {
		c.errs = append(c.errs, e)
		return
	}
	c.dropped++
}

// errors returns every kept refusal, followed by a *TooManyRefusalsError
// when some were dropped.
func (c *checker) errors() error {
	if c.dropped > 0 {
		return errors.Join(append(c.errs, &TooManyRefusalsError{Dropped: c.dropped})...)
	}
	return errors.Join(c.errs...)
}

// run applies every semantic rule to a schema-valid document.
func (c *checker) run(root map[string]any) *Report {
	c.features(root)
	c.loadResources(root)
	c.loadTools(root)
	c.loadEvents(root)
	c.loadBranches(root)
	c.loadBindings(root)
	c.progression()
	c.checkBindings(root)
	c.results()
	c.references(root)
	c.taskRules(root)
	report := &Report{Version: Version, Unchecked: uncheckedPresent(root)}
	report.Streams = c.streams(root)
	report.Branches = c.selectedStates()
	return report
}

// Accessors for schema-validated trees. The schema guarantees the types of
// the fields read here; a mismatch yields the zero value, never a panic.

func str(o map[string]any, k string) string { s, _ := o[k].(string); return s }

func obj(o map[string]any, k string) map[string]any { m, _ := o[k].(map[string]any); return m }

func arr(o map[string]any, k string) []any { a, _ := o[k].([]any); return a }

func boolean(o map[string]any, k string) bool { b, _ := o[k].(bool); return b }

func has(o map[string]any, k string) bool { _, ok := o[k]; return ok }

// integer reads a schema-checked integer (0 ≤ n ≤ 2^53-1, possibly written
// as 1.0 or 1e0).
func integer(o map[string]any, k string) int64 {
	n, _ := o[k].(json.Number)
	if v, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return v
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return -1
	}
	return int64(f)
}

func objects(o map[string]any, k string) []map[string]any {
	items := arr(o, k)
	out := make([]map[string]any, 0, len(items))
	for _, it := range items {
		if m, ok := it.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func (c *checker) features(root map[string]any) {
	for _, f := range arr(root, "required_features") {
		name, _ := f.(string)
		if name != FeatureStreams && name != FeatureExternalBindings {
			c.refuse(RuleFeatureUnsupported, "required_features", name)
		}
	}
}

func (c *checker) loadResources(root map[string]any) {
	c.resources = map[string]*resource{}
	for _, r := range objects(root, "resources") {
		res := &resource{id: str(r, "id"), availability: str(r, "availability")}
		if _, dup := c.resources[res.id]; dup {
			c.refuse(RuleResourceDuplicateID, "resource", res.id)
			continue
		}
		c.resources[res.id] = res
		if res.availability != "embedded" {
			continue
		}
		content, ok := c.decodeResource(res.id, r)
		if !ok {
			continue
		}
		if int64(len(content)) != integer(r, "bytes") {
			c.refuse(RuleResourceBytes, "resource", res.id)
			continue
		}
		sum := sha256.Sum256(content)
		if hex.EncodeToString(sum[:]) != str(r, "sha256") {
			c.refuse(RuleResourceSHA256, "resource", res.id)
			continue
		}
		res.content, res.verified = content, true
	}
}

// decodeResource returns an embedded resource's decoded bytes. The schema
// guarantees exactly one of text, data and path.
func (c *checker) decodeResource(id string, r map[string]any) ([]byte, bool) {
	switch {
	case has(r, "text"):
		return []byte(str(r, "text")), true
	case has(r, "data"):
		data := str(r, "data")
		if strings.ContainsAny(data, "\r\n") {
			c.refuse(RuleResourceBase64, "resource", id)
			return nil, false
		}
		b, err := base64.StdEncoding.Strict().DecodeString(data)
		if err != nil {
			c.refuse(RuleResourceBase64, "resource", id)
			return nil, false
		}
		return b, true
	default:
		b, ok := c.readPath(str(r, "path"))
		if !ok {
			c.refuse(RuleResourcePath, "resource", id)
		}
		return b, ok
	}
}

// readPath reads a path-backed resource from Options.Files, refusing paths
// that are not plain relative slash-separated paths (SEMANTICS §10).
func (c *checker) readPath(name string) ([]byte, bool) {
	if c.opts.Files == nil || !fs.ValidPath(name) || name == "." ||
		strings.ContainsAny(name, `\:`) {
		return nil, false
	}
	f, err := c.opts.Files.Open(name)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() > MaxResourceBytes ||
		c.pathBytes+st.Size() > MaxPathBytes {
		return nil, false
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxResourceBytes+1))
	if err != nil || len(b) > MaxResourceBytes || c.pathBytes+int64(len(b)) > MaxPathBytes {
		return nil, false
	}
	c.pathBytes += int64(len(b))
	return b, true
}

func (c *checker) loadTools(root map[string]any) {
	c.tools = map[string]bool{}
	for _, t := range objects(root, "tools") {
		c.tools[str(t, "id")] = true
	}
}

func (c *checker) loadEvents(root map[string]any) {
	c.events = map[string]*event{}
	lastSeq := int64(-1)
	for i, e := range objects(root, "events") {
		ev := &event{
			pos:   i,
			id:    str(e, "id"),
			seq:   integer(e, "sequence"),
			actor: str(e, "actor_id"),
			kind:  str(e, "kind"),
		}
		ev.exec, ev.hasExec = e["execution_id"].(string)
		if s := obj(e, "supersedes"); s != nil {
			ev.supersedes = &eventRef{
				eventID:  str(s, "event_id"),
				external: has(s, "capture_id") || has(s, "session_id"),
			}
		}
		for _, r := range objects(e, "causes") {
			if !has(r, "capture_id") && !has(r, "session_id") {
				ev.causes = append(ev.causes, str(r, "event_id"))
			}
		}
		d := obj(e, "data")
		switch ev.kind {
		case "tool_call":
			ev.callID = str(d, "call_id")
			ev.toolID = str(d, "tool_id")
			ev.argsStatus = str(d, "arguments_status")
			ev.retryOf, ev.hasRetry = d["retry_of"].(string)
			ev.args = d["arguments"]
		case "task_update":
			ev.task = loadTask(d)
		case "tool_result":
			ev.callID = str(d, "call_id")
			ev.resultIndex = integer(d, "result_index")
			ev.terminal = boolean(d, "terminal")
			ev.outcome = str(d, "outcome")
			ev.parts = arr(d, "parts")
		}
		if _, dup := c.events[ev.id]; dup {
			c.refuse(RuleEventDuplicateID, "event", ev.id)
			continue
		}
		if ev.seq <= lastSeq {
			c.refuse(RuleEventSequence, "event", ev.id)
		}
		lastSeq = max(lastSeq, ev.seq)
		c.events[ev.id] = ev
		c.eventList = append(c.eventList, ev)
		if ev.task != nil {
			if c.taskRevisions == nil {
				c.taskRevisions = map[taskKey]*event{}
			}
			k := taskKey{ev.task.id, ev.task.revision}
			if c.taskRevisions[k] != nil {
				c.refuse(RuleTaskDuplicateRevision, "event", ev.id)
			} else {
				c.taskRevisions[k] = ev
			}
		}
		if ev.kind == "decision_request" {
			if c.requests == nil {
				c.requests = map[string]bool{}
			}
			c.requests[str(d, "request_id")] = true
		}
	}
	for _, ev := range c.eventList {
		if ev.supersedes != nil && !ev.supersedes.external {
			if p := c.events[ev.supersedes.eventID]; p != nil && p.pos < ev.pos {
				p.superseded = true
			}
		}
	}
}

func (c *checker) loadBranches(root map[string]any) {
	for _, b := range objects(root, "branches") {
		br := branch{id: str(b, "id")}
		missing := false
		for _, id := range arr(b, "event_ids") {
			s, _ := id.(string)
			if c.events[s] == nil {
				missing = true
				continue
			}
			br.eventIDs = append(br.eventIDs, s)
		}
		if missing {
			c.refuse(RuleBranchEventMissing, "branch", br.id)
		}
		c.branches = append(c.branches, br)
	}
}

func (c *checker) loadBindings(root map[string]any) {
	c.callBindings = map[string]*binding{}
	seen := map[[2]string]bool{}
	for _, b := range objects(root, "external_bindings") {
		src := obj(b, "source")
		d := obj(b, "descriptor")
		bd := &binding{
			kind: str(b, "kind"),
			id:   str(b, "id"),
			source: BindingSource{
				SessionID: str(src, "session_id"),
				CaptureID: str(src, "capture_id"),
				EventID:   str(src, "event_id"),
			},
		}
		key := [2]string{bd.kind, bd.id}
		if seen[key] {
			c.refuse(RuleBindingDuplicate, "external_binding", bd.id)
			continue
		}
		seen[key] = true
		if bd.kind == "call" {
			bd.toolID = str(d, "tool_id")
			bd.args = d["arguments"]
			bd.argsStatus = str(d, "arguments_status")
			c.callBindings[bd.id] = bd
		}
		c.bindings = append(c.bindings, bd)
	}
}

// progression applies the tool-call identity and amendment rules
// (SEMANTICS §6, "Tool-call progression across captures").
func (c *checker) progression() {
	c.calls = map[string]*event{}
	for _, e := range c.eventList {
		if e.kind != "tool_call" {
			continue
		}
		if !c.tools[e.toolID] {
			c.refuse(RuleCallToolUndefined, "event", e.id)
		}
		if e.hasRetry && e.retryOf == e.callID {
			c.refuse(RuleCallRetryOfSelf, "event", e.id)
		}
		if e.supersedes == nil {
			if _, dup := c.calls[e.callID]; dup {
				c.refuse(RuleCallDuplicateIdentity, "event", e.id)
				continue
			}
			c.calls[e.callID] = e
			continue
		}
		if e.supersedes.external {
			c.refuse(RuleAmendmentPredecessorMissing, "event", e.id)
			continue
		}
		p := c.events[e.supersedes.eventID]
		if p == nil {
			c.refuse(RuleAmendmentPredecessorMissing, "event", e.id)
			continue
		}
		if p.kind != "tool_call" || p.pos >= e.pos {
			c.refuse(RuleAmendmentPredecessorInvalid, "event", e.id)
			continue
		}
		if e.callID != p.callID {
			c.refuse(RuleAmendmentChangedCallID, "event", e.id)
		}
		if e.toolID != p.toolID {
			c.refuse(RuleAmendmentChangedTool, "event", e.id)
		}
		if e.actor != p.actor {
			c.refuse(RuleAmendmentChangedActor, "event", e.id)
		}
		if e.hasExec != p.hasExec || e.exec != p.exec {
			c.refuse(RuleAmendmentChangedExecution, "event", e.id)
		}
		if e.hasRetry != p.hasRetry || e.retryOf != p.retryOf {
			c.refuse(RuleAmendmentChangedRetry, "event", e.id)
		}
		switch {
		case p.argsStatus == "complete":
			c.refuse(RuleAmendmentOfComplete, "event", e.id)
		case p.argsStatus == "partial" && e.argsStatus == "unknown":
			c.refuse(RuleAmendmentRegressed, "event", e.id)
		}
		if _, known := c.calls[e.callID]; !known && e.callID == p.callID {
			c.calls[e.callID] = p
		}
	}
}

func (c *checker) checkBindings(root map[string]any) {
	for _, b := range objects(root, "external_bindings") {
		kind, id := str(b, "kind"), str(b, "id")
		d := obj(b, "descriptor")
		switch kind {
		case "call":
			if _, local := c.calls[id]; local {
				c.refuse(RuleBindingDuplicatesLocal, "external_binding", id)
			}
			if !c.tools[str(d, "tool_id")] {
				c.refuse(RuleBindingToolUndefined, "external_binding", id)
			}
		case "request":
			if c.requests[id] {
				c.refuse(RuleBindingDuplicatesLocal, "external_binding", id)
			}
			for _, part := range objects(d, "prompt") {
				k := str(part, "kind")
				if (k == "resource" || k == "opaque") && c.resources[str(part, "resource_id")] == nil {
					c.refuse(RuleBindingResourceMissing, "external_binding", id)
					break
				}
			}
			opts := map[string]bool{}
			for _, o := range objects(d, "options") {
				if opts[str(o, "id")] {
					c.refuse(RuleBindingOptionDuplicate, "external_binding", id)
					break
				}
				opts[str(o, "id")] = true
			}
		}
	}
}

// results checks result correlation and order over the results no later
// local event supersedes (a corrected result is replaced, not repeated).
func (c *checker) results() {
	last := map[string]int64{}
	closed := map[string]bool{}
	for _, e := range c.eventList {
		if e.kind != "tool_result" || e.superseded {
			continue
		}
		_, local := c.calls[e.callID]
		_, bound := c.callBindings[e.callID]
		if !local && !bound {
			c.refuse(RuleResultWithoutCall, "event", e.id)
			continue
		}
		if closed[e.callID] {
			c.refuse(RuleResultAfterTerminal, "event", e.id)
		}
		if prev, ok := last[e.callID]; ok && e.resultIndex <= prev {
			c.refuse(RuleResultIndexOrder, "event", e.id)
		}
		last[e.callID] = max(last[e.callID], e.resultIndex)
		if e.terminal {
			closed[e.callID] = true
		}
	}
}

// canonical re-encodes a decoded JSON value; map keys come out sorted and
// json.Number keeps its exact text.
func canonical(v any) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return json.RawMessage("null")
	}
	return json.RawMessage(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}
