// Package asifdoc is the ASIF 0.5 document model Skulk writes: typed
// records that marshal to the field names of the session schema, and a
// builder (NewDocument, AddEvent, AddStream, AddExternalBinding) that keeps
// the required collections, coverage records, sequence numbers and branch
// consistent. Document.Marshal checks its own output with asif.Check, so a
// document it returns without error is valid. Package asif/export builds
// its sessions with it.
package asifdoc

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"slices"

	"github.com/skulkrt/skulk/asif"
)

// Every type marshals to the field names of the ASIF 0.5 schema; required
// arrays marshal as [] when nil, and optional fields are omitted when zero.

// EventKind is an event's kind.
type EventKind string

// Event kinds of ASIF 0.5 (SEMANTICS §6).
const (
	EventMessage             EventKind = "message"
	EventToolCall            EventKind = "tool_call"
	EventToolResult          EventKind = "tool_result"
	EventDecisionRequest     EventKind = "decision_request"
	EventDecisionResolution  EventKind = "decision_resolution"
	EventTaskUpdate          EventKind = "task_update"
	EventContextCheckpoint   EventKind = "context_checkpoint"
	EventConfigurationChange EventKind = "configuration_change"
	EventExecutionTransition EventKind = "execution_transition"
	EventResourceChange      EventKind = "resource_change"
	EventNote                EventKind = "note"
	EventExtension           EventKind = "extension"
)

// String returns the kind as written in documents.
func (k EventKind) String() string { return string(k) }

// CoverageScope is one of the 13 coverage domains.
type CoverageScope string

// Coverage scopes; a document holds exactly one record for each.
const (
	ScopeParticipants  CoverageScope = "participants"
	ScopeConversation  CoverageScope = "conversation"
	ScopeBranches      CoverageScope = "branches"
	ScopeExecutions    CoverageScope = "executions"
	ScopeContexts      CoverageScope = "contexts"
	ScopeConfiguration CoverageScope = "configuration"
	ScopeTools         CoverageScope = "tools"
	ScopeDecisions     CoverageScope = "decisions"
	ScopeTasks         CoverageScope = "tasks"
	ScopeResources     CoverageScope = "resources"
	ScopeEnvironment   CoverageScope = "environment"
	ScopeNative        CoverageScope = "native"
	ScopeUsage         CoverageScope = "usage"
)

// String returns the scope as written in documents.
func (s CoverageScope) String() string { return string(s) }

// CoverageScopes returns the 13 coverage scopes in schema order (a fresh
// slice on every call).
func CoverageScopes() []CoverageScope {
	return []CoverageScope{
		ScopeParticipants, ScopeConversation, ScopeBranches, ScopeExecutions,
		ScopeContexts, ScopeConfiguration, ScopeTools, ScopeDecisions,
		ScopeTasks, ScopeResources, ScopeEnvironment, ScopeNative, ScopeUsage,
	}
}

// CoverageStatus states how completely a domain was captured.
type CoverageStatus string

// Coverage statuses.
const (
	CoverageComplete      CoverageStatus = "complete"
	CoveragePartial       CoverageStatus = "partial"
	CoverageKnownEmpty    CoverageStatus = "known_empty"
	CoverageUnavailable   CoverageStatus = "unavailable"
	CoverageExcluded      CoverageStatus = "excluded"
	CoverageNotInspected  CoverageStatus = "not_inspected"
	CoverageNotApplicable CoverageStatus = "not_applicable"
)

// String returns the status as written in documents.
func (s CoverageStatus) String() string { return string(s) }

// Document is an ASIF 0.5 session document under construction. Build it
// with NewDocument, fill it, and write it with Marshal. The zero value is
// not a valid document. A Document is not safe for concurrent mutation.
type Document struct {
	Capture          Capture
	Session          SessionInfo
	Participants     []Participant
	Events           []Event
	Branches         []Branch
	Executions       []Execution
	Contexts         []json.RawMessage // pre-encoded Context objects
	Configurations   []json.RawMessage // pre-encoded Configuration objects
	Tools            []Tool
	Resources        []Resource
	Environments     []json.RawMessage // pre-encoded Environment objects
	Checkpoints      []Checkpoint
	Coverage         []Coverage
	Losses           []Loss
	RequiredFeatures []string
	// Streams is written when asif.FeatureStreams is required or it is
	// non-empty; AddStream declares the feature.
	Streams []Stream
	// ExternalBindings is written when asif.FeatureExternalBindings is required
	// or it is non-empty; AddExternalBinding declares the feature.
	ExternalBindings []ExternalBinding
}

// NewDocument returns a document with every required collection present and
// empty, and one coverage record per scope, each not_inspected (the only
// status that claims nothing); callers then state real coverage with
// SetCoverage.
func NewDocument(capture Capture, session SessionInfo) *Document {
	d := &Document{Capture: capture, Session: session}
	for _, s := range CoverageScopes() {
		d.Coverage = append(d.Coverage, Coverage{
			Scope: s, Status: CoverageNotInspected,
			Detail: "Not inspected by this producer.",
		})
	}
	return d
}

// SetCoverage replaces the coverage record of scope (adding it if absent).
func (d *Document) SetCoverage(scope CoverageScope, status CoverageStatus, detail string) {
	for i := range d.Coverage {
		if d.Coverage[i].Scope == scope {
			d.Coverage[i] = Coverage{Scope: scope, Status: status, Detail: detail}
			return
		}
	}
	d.Coverage = append(d.Coverage, Coverage{Scope: scope, Status: status, Detail: detail})
}

// AddEvent appends e with the next sequence number (one more than the last
// event's, or 0), appends its id to the branch branchID (creating the
// branch if needed) and makes it that branch's head. It returns the
// sequence assigned.
func (d *Document) AddEvent(branchID string, e Event) int64 {
	if n := len(d.Events); n > 0 {
		e.Sequence = d.Events[n-1].Sequence + 1
	} else {
		e.Sequence = 0
	}
	d.Events = append(d.Events, e)
	b := d.branch(branchID)
	b.EventIDs = append(b.EventIDs, e.ID)
	head := e.ID
	b.HeadEventID = &head
	return e.Sequence
}

// branch returns the branch with the given id, appending an empty one if
// there is none.
func (d *Document) branch(id string) *Branch {
	for i := range d.Branches {
		if d.Branches[i].ID == id {
			return &d.Branches[i]
		}
	}
	d.Branches = append(d.Branches, Branch{ID: id})
	return &d.Branches[len(d.Branches)-1]
}

// AddStream appends s and declares asif.FeatureStreams.
func (d *Document) AddStream(s Stream) {
	d.Streams = append(d.Streams, s)
	d.require(asif.FeatureStreams)
}

// AddExternalBinding appends b and declares asif.FeatureExternalBindings.
func (d *Document) AddExternalBinding(b ExternalBinding) {
	d.ExternalBindings = append(d.ExternalBindings, b)
	d.require(asif.FeatureExternalBindings)
}

// require declares feature once.
func (d *Document) require(feature string) {
	if !d.requires(feature) {
		d.RequiredFeatures = append(d.RequiredFeatures, feature)
	}
}

func (d *Document) requires(feature string) bool {
	return slices.Contains(d.RequiredFeatures, feature)
}

// Marshal encodes the document as indented JSON and checks the result with
// asif.Check (no Options.Files: write resources as text or data). It returns the
// bytes together with Check's error; bytes returned with a non-nil error
// are for diagnosis only and must not be published as a valid document.
func (d *Document) Marshal() ([]byte, error) {
	data, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	data = append(data, '\n')
	_, err = asif.Check(data, asif.Options{})
	return data, err
}

// MarshalJSON writes the document with asif_version "0.5" and every
// required collection present.
func (d Document) MarshalJSON() ([]byte, error) {
	type wire struct {
		Version          string             `json:"asif_version"`
		Capture          Capture            `json:"capture"`
		Session          SessionInfo        `json:"session"`
		Participants     []Participant      `json:"participants"`
		Events           []Event            `json:"events"`
		Branches         []Branch           `json:"branches"`
		Executions       []Execution        `json:"executions"`
		Contexts         []json.RawMessage  `json:"contexts"`
		Configurations   []json.RawMessage  `json:"configurations"`
		Tools            []Tool             `json:"tools"`
		Resources        []Resource         `json:"resources"`
		Environments     []json.RawMessage  `json:"environments"`
		Checkpoints      []Checkpoint       `json:"checkpoints"`
		Coverage         []Coverage         `json:"coverage"`
		Losses           []Loss             `json:"losses"`
		RequiredFeatures []string           `json:"required_features"`
		Streams          *[]Stream          `json:"streams,omitempty"`
		ExternalBindings *[]ExternalBinding `json:"external_bindings,omitempty"`
	}
	w := wire{
		Version:          asif.Version,
		Capture:          d.Capture,
		Session:          d.Session,
		Participants:     nonNil(d.Participants),
		Events:           nonNil(d.Events),
		Branches:         nonNil(d.Branches),
		Executions:       nonNil(d.Executions),
		Contexts:         nonNil(d.Contexts),
		Configurations:   nonNil(d.Configurations),
		Tools:            nonNil(d.Tools),
		Resources:        nonNil(d.Resources),
		Environments:     nonNil(d.Environments),
		Checkpoints:      nonNil(d.Checkpoints),
		Coverage:         nonNil(d.Coverage),
		Losses:           nonNil(d.Losses),
		RequiredFeatures: nonNil(d.RequiredFeatures),
	}
	if len(d.Streams) > 0 || d.requires(asif.FeatureStreams) {
		s := nonNil(d.Streams)
		w.Streams = &s
	}
	if len(d.ExternalBindings) > 0 || d.requires(asif.FeatureExternalBindings) {
		b := nonNil(d.ExternalBindings)
		w.ExternalBindings = &b
	}
	return json.Marshal(w)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// Capture describes this immutable observation of the session.
type Capture struct {
	ID       string   `json:"id"`
	Producer Producer `json:"producer"`
	// Consistency is "consistent", "partial" or "unknown".
	Consistency string `json:"consistency"`
	// Boundary says what was observed and what was not.
	Boundary  string `json:"boundary"`
	StartedAt string `json:"started_at,omitempty"`
	EndedAt   string `json:"ended_at,omitempty"`
}

// Producer names the software that wrote the capture.
type Producer struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// SessionInfo is the document's session object.
type SessionInfo struct {
	ID        string     `json:"id"`
	Title     string     `json:"title,omitempty"`
	Objective []Part     `json:"objective,omitempty"`
	NativeIDs []NativeID `json:"native_ids"`
	Lineage   []Lineage  `json:"lineage"`
}

// MarshalJSON writes native_ids and lineage as [] when nil.
func (s SessionInfo) MarshalJSON() ([]byte, error) {
	type plain SessionInfo
	p := plain(s)
	p.NativeIDs, p.Lineage = nonNil(p.NativeIDs), nonNil(p.Lineage)
	return json.Marshal(p)
}

// NativeID is a provider's own identifier for the session.
type NativeID struct {
	Provider  string `json:"provider"`
	Namespace string `json:"namespace"`
	Value     string `json:"value"`
}

// Lineage relates this capture to another capture or session.
type Lineage struct {
	// Relation is "continuation", "fork", "translation" or "copy".
	Relation  string `json:"relation"`
	SessionID string `json:"session_id"`
	CaptureID string `json:"capture_id"`
	EventID   string `json:"event_id,omitempty"`
	// Inclusive is required (with EventID) for fork and translation.
	Inclusive *bool `json:"inclusive,omitempty"`
}

// Participant is a human, agent, tool, service or unknown actor.
type Participant struct {
	ID string `json:"id"`
	// Kind is "human", "agent", "tool", "service" or "unknown".
	Kind     string `json:"kind"`
	Name     string `json:"name,omitempty"`
	Provider string `json:"provider,omitempty"`
}

// Event is one immutable recorded occurrence.
type Event struct {
	ID string `json:"id"`
	// Sequence is assigned by Document.AddEvent.
	Sequence   int64      `json:"sequence"`
	ActorID    string     `json:"actor_id"`
	Kind       EventKind  `json:"kind"`
	Causes     []EventRef `json:"causes"`
	Provenance Provenance `json:"provenance"`
	// Data is the kind's data object: *ToolCallData, *ToolResultData,
	// *MessageData, *NoteData, or any value marshaling to the kind's
	// schema.
	Data        any       `json:"data"`
	Time        string    `json:"time,omitempty"`
	ExecutionID string    `json:"execution_id,omitempty"`
	Supersedes  *EventRef `json:"supersedes,omitempty"`
	// Extensions are the event's producer-specific members; nil for none.
	Extensions map[string]any `json:"extensions,omitempty"`
}

// MarshalJSON writes causes as [] when nil.
func (e Event) MarshalJSON() ([]byte, error) {
	type plain Event
	p := plain(e)
	p.Causes = nonNil(p.Causes)
	return json.Marshal(p)
}

// EventRef references an event: locally by EventID alone, or an external
// event by also naming its session and capture.
type EventRef struct {
	EventID   string `json:"event_id"`
	SessionID string `json:"session_id,omitempty"`
	CaptureID string `json:"capture_id,omitempty"`
}

// Provenance says how a record was obtained.
type Provenance struct {
	// Mode is "observed", "reported", "derived" or "synthetic".
	Mode     string `json:"mode"`
	Producer string `json:"producer"`
	// Method and Inputs are required for derived and synthetic records;
	// nil Inputs marshal as [] for those modes.
	Method  string             `json:"method,omitempty"`
	Inputs  []EventRef         `json:"inputs,omitempty"`
	Sources []ProvenanceSource `json:"sources,omitempty"`
}

// MarshalJSON writes inputs as [] for derived and synthetic records.
func (p Provenance) MarshalJSON() ([]byte, error) {
	type plain struct {
		Mode     string             `json:"mode"`
		Producer string             `json:"producer"`
		Method   string             `json:"method,omitempty"`
		Inputs   *[]EventRef        `json:"inputs,omitempty"`
		Sources  []ProvenanceSource `json:"sources,omitempty"`
	}
	q := plain{Mode: p.Mode, Producer: p.Producer, Method: p.Method, Sources: p.Sources}
	if len(p.Inputs) > 0 || p.Mode == "derived" || p.Mode == "synthetic" {
		in := nonNil(p.Inputs)
		q.Inputs = &in
	}
	return json.Marshal(q)
}

// ProvenanceSource points into a resource the record came from.
type ProvenanceSource struct {
	ResourceID string   `json:"resource_id"`
	Locator    *Locator `json:"locator,omitempty"`
}

// Locator selects part of a source resource; byte locators use Offset and
// Length.
type Locator struct {
	Syntax string `json:"syntax"`
	Value  any    `json:"value,omitempty"`
	Offset *int64 `json:"offset,omitempty"`
	Length *int64 `json:"length,omitempty"`
}

// ToolCallData is a tool_call event's data.
type ToolCallData struct {
	CallID string `json:"call_id"`
	ToolID string `json:"tool_id"`
	// Arguments is the exact known arguments value; nil marshals as null.
	Arguments       json.RawMessage      `json:"arguments"`
	ArgumentsStatus asif.ArgumentsStatus `json:"arguments_status"`
	RetryOf         string               `json:"retry_of,omitempty"`
}

// MarshalJSON writes a nil Arguments as null.
func (t ToolCallData) MarshalJSON() ([]byte, error) {
	type plain ToolCallData
	p := plain(t)
	if len(p.Arguments) == 0 {
		p.Arguments = json.RawMessage("null")
	}
	return json.Marshal(p)
}

// ToolResultData is a tool_result event's data. Non-terminal results must
// have OutcomeUnknown.
type ToolResultData struct {
	CallID      string       `json:"call_id"`
	ResultIndex int64        `json:"result_index"`
	Terminal    bool         `json:"terminal"`
	Outcome     asif.Outcome `json:"outcome"`
	Parts       []Part       `json:"parts"`
}

// MarshalJSON writes parts as [] when nil.
func (t ToolResultData) MarshalJSON() ([]byte, error) {
	type plain ToolResultData
	p := plain(t)
	p.Parts = nonNil(p.Parts)
	return json.Marshal(p)
}

// MessageData is a message event's data.
type MessageData struct {
	// Role is "user", "assistant", "system", "developer", "tool" or
	// "unknown".
	Role  string `json:"role"`
	Parts []Part `json:"parts"`
}

// MarshalJSON writes parts as [] when nil.
func (m MessageData) MarshalJSON() ([]byte, error) {
	type plain MessageData
	p := plain(m)
	p.Parts = nonNil(p.Parts)
	return json.Marshal(p)
}

// NoteData is a note event's data: explanatory evidence with no execution
// meaning.
type NoteData struct {
	Parts    []Part `json:"parts"`
	Category string `json:"category"`
}

// MarshalJSON writes parts as [] when nil.
func (n NoteData) MarshalJSON() ([]byte, error) {
	type plain NoteData
	p := plain(n)
	p.Parts = nonNil(p.Parts)
	return json.Marshal(p)
}

// Part is one content part. Build it with TextPart or ResourcePart.
type Part struct {
	// Kind is "text" or "resource".
	Kind        string
	Text        string
	MediaType   string
	ResourceID  string
	Description string
}

// TextPart returns a text part holding s exactly.
func TextPart(s string) Part { return Part{Kind: "text", Text: s} }

// ResourcePart returns a part referencing a declared resource.
func ResourcePart(resourceID string) Part { return Part{Kind: "resource", ResourceID: resourceID} }

// MarshalJSON writes the fields of the part's kind.
func (p Part) MarshalJSON() ([]byte, error) {
	if p.Kind == "text" {
		return json.Marshal(struct {
			Kind      string `json:"kind"`
			Text      string `json:"text"`
			MediaType string `json:"media_type,omitempty"`
		}{p.Kind, p.Text, p.MediaType})
	}
	return json.Marshal(struct {
		Kind        string `json:"kind"`
		ResourceID  string `json:"resource_id"`
		Description string `json:"description,omitempty"`
	}{p.Kind, p.ResourceID, p.Description})
}

// Branch is a selected history.
type Branch struct {
	ID       string   `json:"id"`
	EventIDs []string `json:"event_ids"`
	// HeadEventID is the final selected event; nil (null) for an empty
	// branch.
	HeadEventID *string `json:"head_event_id"`
}

// MarshalJSON writes event_ids as [] when nil.
func (b Branch) MarshalJSON() ([]byte, error) {
	type plain Branch
	p := plain(b)
	p.EventIDs = nonNil(p.EventIDs)
	return json.Marshal(p)
}

// Execution is a recorded activity interval of a participant.
type Execution struct {
	ID            string `json:"id"`
	ParticipantID string `json:"participant_id"`
	// Status is "running", "completed", "failed", "cancelled",
	// "interrupted" or "unknown".
	Status     string   `json:"status"`
	ContextIDs []string `json:"context_ids"`
	StartedAt  string   `json:"started_at,omitempty"`
	EndedAt    string   `json:"ended_at,omitempty"`
}

// MarshalJSON writes context_ids as [] when nil.
func (e Execution) MarshalJSON() ([]byte, error) {
	type plain Execution
	p := plain(e)
	p.ContextIDs = nonNil(p.ContextIDs)
	return json.Marshal(p)
}

// Tool is a tool definition.
type Tool struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description"`
	// InputSchema is a JSON Schema 2020-12 object or boolean; nil marshals
	// as true (unknown input contract).
	InputSchema    json.RawMessage `json:"input_schema"`
	OutputSchema   json.RawMessage `json:"output_schema,omitempty"`
	ServerIdentity string          `json:"server_identity,omitempty"`
	Revision       string          `json:"revision,omitempty"`
}

// MarshalJSON writes a nil InputSchema as true.
func (t Tool) MarshalJSON() ([]byte, error) {
	type plain Tool
	p := plain(t)
	if len(p.InputSchema) == 0 {
		p.InputSchema = json.RawMessage("true")
	}
	return json.Marshal(p)
}

// Resource describes content. Build embedded resources with TextResource or
// DataResource, which compute Bytes and SHA256.
type Resource struct {
	ID        string `json:"id"`
	MediaType string `json:"media_type"`
	// Availability is "embedded", "external", "unavailable", "excluded",
	// "redacted" or "unknown".
	Availability string `json:"availability"`
	Purpose      string `json:"purpose"`
	Name         string `json:"name,omitempty"`
	Bytes        *int64 `json:"bytes,omitempty"`
	SHA256       string `json:"sha256,omitempty"`
	// Text and Data are the embedded representations (exactly one).
	Text *string `json:"text,omitempty"`
	Data string  `json:"data,omitempty"`
	// Locator and Explanation describe external resources; Explanation
	// also explains unavailable, excluded, redacted and unknown ones.
	Locator     string `json:"locator,omitempty"`
	Explanation string `json:"explanation,omitempty"`
}

// TextResource returns an embedded resource holding text (UTF-8) with its
// exact byte length and SHA-256.
func TextResource(id, mediaType, purpose, text string) Resource {
	r := embedded(id, mediaType, purpose, []byte(text))
	r.Text = &text
	return r
}

// DataResource returns an embedded resource holding b as base64 with its
// exact byte length and SHA-256. Use it for bytes that are not UTF-8.
func DataResource(id, mediaType, purpose string, b []byte) Resource {
	r := embedded(id, mediaType, purpose, b)
	r.Data = base64.StdEncoding.EncodeToString(b)
	return r
}

// embedded returns an embedded resource describing b (its byte length and
// SHA-256) with neither representation set.
func embedded(id, mediaType, purpose string, b []byte) Resource {
	n := int64(len(b))
	sum := sha256.Sum256(b)
	return Resource{
		ID: id, MediaType: mediaType, Availability: "embedded", Purpose: purpose,
		Bytes: &n, SHA256: hex.EncodeToString(sum[:]),
	}
}

// Checkpoint records state at a branch boundary; each branch head needs one.
type Checkpoint struct {
	ID       string `json:"id"`
	BranchID string `json:"branch_id"`
	// AtEventID is the boundary event; nil (null) for an empty branch.
	AtEventID *string `json:"at_event_id"`
	// Knowledge is "observed", "derived" or "unknown".
	Knowledge string `json:"knowledge"`
	// Status is "idle", "active", "waiting", "stopped", "ended" or
	// "unknown".
	Status          string            `json:"status"`
	ContextID       *string           `json:"context_id"`
	ConfigurationID *string           `json:"configuration_id"`
	OpenCalls       []OpenCall        `json:"open_calls"`
	OpenDecisions   []json.RawMessage `json:"open_decisions"`
	Tasks           []json.RawMessage `json:"tasks"`
	Requirements    []json.RawMessage `json:"requirements"`
}

// MarshalJSON writes the four arrays as [] when nil.
func (c Checkpoint) MarshalJSON() ([]byte, error) {
	type plain Checkpoint
	p := plain(c)
	p.OpenCalls = nonNil(p.OpenCalls)
	p.OpenDecisions = nonNil(p.OpenDecisions)
	p.Tasks = nonNil(p.Tasks)
	p.Requirements = nonNil(p.Requirements)
	return json.Marshal(p)
}

// OpenCall is an unresolved call at a checkpoint.
type OpenCall struct {
	CallID string `json:"call_id"`
	// State is "pending" (recorded evidence) or "outcome_unknown".
	State string `json:"state"`
}

// Coverage states how completely one domain was captured.
type Coverage struct {
	Scope  CoverageScope  `json:"scope"`
	Status CoverageStatus `json:"status"`
	Detail string         `json:"detail"`
}

// Loss records something the capture or translation could not carry.
type Loss struct {
	ID string `json:"id"`
	// Stage is "capture", "normalization", "redaction" or "translation".
	Stage string `json:"stage"`
	Kind  string `json:"kind"`
	// Scope or References (or both) must be set.
	Scope       CoverageScope   `json:"scope,omitempty"`
	References  []LossReference `json:"references,omitempty"`
	Explanation string          `json:"explanation"`
}

// LossReference names an affected object by type and id.
type LossReference struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

// Stream is an asif.streams/0.1 stream.
type Stream struct {
	ID      string          `json:"id"`
	Kind    asif.StreamKind `json:"kind"`
	EventID string          `json:"event_id"`
	CallID  string          `json:"call_id"`
	// ResultIndex is required for StreamToolResultText.
	ResultIndex *int64            `json:"result_index,omitempty"`
	Status      asif.StreamStatus `json:"status"`
	Segments    []Segment         `json:"segments"`
}

// MarshalJSON writes segments as [] when nil.
func (s Stream) MarshalJSON() ([]byte, error) {
	type plain Stream
	p := plain(s)
	p.Segments = nonNil(p.Segments)
	return json.Marshal(p)
}

// Segment selects bytes [Offset, Offset+Length) of an embedded resource.
type Segment struct {
	Index      int64  `json:"index"`
	ResourceID string `json:"resource_id"`
	Offset     int64  `json:"offset"`
	Length     int64  `json:"length"`
	Terminal   bool   `json:"terminal"`
}

// ExternalBinding is an asif.external-bindings/0.1 binding: one call or
// decision request outside the included history. It never stands for a
// local event.
type ExternalBinding struct {
	// Kind is "call" or "request".
	Kind   string             `json:"kind"`
	ID     string             `json:"id"`
	Source asif.BindingSource `json:"source"`
	// Descriptor is a *CallDescriptor for call bindings, or a value
	// marshaling to a request descriptor.
	Descriptor any `json:"descriptor"`
}

// CallDescriptor describes an external call; its tool must be defined
// locally.
type CallDescriptor struct {
	ToolID string `json:"tool_id"`
	// Arguments is the exact known arguments value; nil marshals as null.
	Arguments       json.RawMessage      `json:"arguments"`
	ArgumentsStatus asif.ArgumentsStatus `json:"arguments_status"`
}

// MarshalJSON writes a nil Arguments as null.
func (c CallDescriptor) MarshalJSON() ([]byte, error) {
	type plain CallDescriptor
	p := plain(c)
	if len(p.Arguments) == 0 {
		p.Arguments = json.RawMessage("null")
	}
	return json.Marshal(p)
}
