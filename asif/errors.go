package asif

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Version is the only asif_version this package reads and writes.
const Version = "0.5"

// ErrUnsupportedVersion is matched (errors.Is) by every *VersionError.
var ErrUnsupportedVersion = errors.New("asif: unsupported asif_version")

// VersionError refuses a document whose asif_version field is missing, not
// a string, or not "0.5". ASIF drafts promise no compatibility with each
// other, so no other version is read, not even for a best-effort check.
type VersionError struct {
	// Found is the version text when it looks like a version number
	// (digits and dots, at most 16 bytes); otherwise it is empty, so that
	// arbitrary document content is never echoed.
	Found string
	// Missing is true when the document has no asif_version string.
	Missing bool
}

var versionShape = regexp.MustCompile(`^[0-9]{1,6}(\.[0-9]{1,6}){0,2}$`)

func newVersionError(v any) *VersionError {
	s, ok := v.(string)
	if !ok {
		return &VersionError{Missing: true}
	}
	if versionShape.MatchString(s) {
		return &VersionError{Found: s}
	}
	return &VersionError{}
}

// Error names the field and the supported version.
func (e *VersionError) Error() string {
	switch {
	case e.Missing:
		return "asif: asif_version: missing or not a string; this checker reads " + Version + " only"
	case e.Found != "":
		return fmt.Sprintf("asif: asif_version: version %s is not supported; this checker reads %s only", e.Found, Version)
	default:
		return "asif: asif_version: not a version number; this checker reads " + Version + " only"
	}
}

// Is reports whether target is ErrUnsupportedVersion.
func (e *VersionError) Is(target error) bool { return target == ErrUnsupportedVersion }

// ErrSchema is matched (errors.Is) by every *SchemaError.
var ErrSchema = errors.New("asif: document does not match the ASIF 0.5 JSON Schema")

// MaxViolations bounds how many schema violations a *SchemaError lists (100);
// Total still counts all of them.
const MaxViolations = 100

// Violation is one failed schema assertion: where in the document and which
// keyword failed. It never holds the offending value.
type Violation struct {
	// InstanceLocation is a JSON Pointer (RFC 6901) into the document,
	// for example "/streams/0/segments/1/length".
	InstanceLocation string `json:"instance_location"`
	// Keyword is the failed schema keyword ("required", "const", "type",
	// "minimum", "enum", "pattern", ...).
	Keyword string `json:"keyword"`
}

// SchemaError reports the document's violations of the embedded ASIF 0.5
// session schema: the innermost failed assertions, sorted by instance
// location.
type SchemaError struct {
	// Violations lists at most MaxViolations violations.
	Violations []Violation
	// Total is the number of violations found.
	Total int
}

// Error lists the violated locations and keywords.
func (e *SchemaError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "asif: schema: %d violation(s)", e.Total)
	for i, v := range e.Violations {
		if i == 5 {
			fmt.Fprintf(&b, "; and %d more", e.Total-5)
			break
		}
		loc := v.InstanceLocation
		if loc == "" {
			loc = "/"
		}
		fmt.Fprintf(&b, "; %s: %s", quoteBounded(loc), v.Keyword)
	}
	return b.String()
}

// Is reports whether target is ErrSchema.
func (e *SchemaError) Is(target error) bool { return target == ErrSchema }

// Rule names one semantic rule of ASIF 0.5 that the JSON Schema cannot
// express: resource integrity, core references, tool-call progression,
// task revisions and dependencies, asif.streams/0.1 or
// asif.external-bindings/0.1. Rules lists them; UncheckedFamilies lists the
// rule families that are not checked. A Rule is itself an error so that it can
// serve as the sentinel for errors.Is:
//
//	if errors.Is(err, asif.RuleSegmentGap) { ... }
type Rule string

// Error returns "asif: rule " followed by the rule name.
func (r Rule) Error() string { return "asif: rule " + string(r) }

// String returns the rule name as it appears in reports.
func (r Rule) String() string { return string(r) }

// Features.
const (
	// RuleFeatureUnsupported: required_features names a feature this
	// checker cannot interpret (it supports asif.streams/0.1 and
	// asif.external-bindings/0.1). ObjectID is the feature identifier.
	RuleFeatureUnsupported Rule = "feature_unsupported"
)

// Resource integrity.
const (
	// RuleResourceDuplicateID: two resources share an id.
	RuleResourceDuplicateID Rule = "resource_duplicate_id"
	// RuleResourceBase64: an embedded resource's data is not strict
	// padded standard base64 (RFC 4648 §4, no line breaks).
	RuleResourceBase64 Rule = "resource_data_not_base64"
	// RuleResourceBytes: the decoded length differs from bytes.
	RuleResourceBytes Rule = "resource_bytes_mismatch"
	// RuleResourceSHA256: the decoded bytes' SHA-256 differs from sha256.
	RuleResourceSHA256 Rule = "resource_sha256_mismatch"
	// RuleResourcePath: a path-backed embedded resource could not be
	// verified: no Options.Files was given, the path is not a safe relative
	// path, the file is missing, not regular or larger than MaxResourceBytes,
	// or the total of path-backed bytes exceeds MaxPathBytes.
	RuleResourcePath Rule = "resource_path_unverified"
)

// Events and tool-call progression (SEMANTICS §5, §6).
const (
	// RuleEventDuplicateID: two events share an id.
	RuleEventDuplicateID Rule = "event_duplicate_id"
	// RuleEventSequence: sequence values are not unique and ascending in
	// array order.
	RuleEventSequence Rule = "event_sequence_order"
	// RuleBranchEventMissing: a branch selects an event id that is not in
	// events. ObjectID is the branch id.
	RuleBranchEventMissing Rule = "branch_event_missing"
	// RuleBranchCallVersion: a branch selects several versions of one
	// invocation and a later selected version does not directly supersede
	// the preceding selected one (reordered, skipped or conflicting
	// amendments). ObjectID is the branch id.
	RuleBranchCallVersion Rule = "branch_call_version_order"
	// RuleCallToolUndefined: a tool_call names a tool_id with no local tool
	// definition.
	RuleCallToolUndefined Rule = "call_tool_undefined"
	// RuleCallDuplicateIdentity: a tool_call repeats an earlier call_id
	// without superseding an earlier version of that call.
	RuleCallDuplicateIdentity Rule = "call_duplicate_identity"
	// RuleCallRetryOfSelf: retry_of equals the call's own call_id.
	RuleCallRetryOfSelf Rule = "call_retry_of_self"
	// RuleAmendmentPredecessorMissing: a tool_call supersedes an event that
	// is not included locally (an external reference naming a capture, or
	// an unknown event id). An amendment needs its authentic local
	// predecessor; a binding cannot stand in for it.
	RuleAmendmentPredecessorMissing Rule = "amendment_predecessor_missing"
	// RuleAmendmentPredecessorInvalid: the superseded local event is not an
	// earlier tool_call.
	RuleAmendmentPredecessorInvalid Rule = "amendment_predecessor_invalid"
	// RuleAmendmentChangedCallID: the amendment's call_id differs from its
	// predecessor's.
	RuleAmendmentChangedCallID Rule = "amendment_changed_call_id"
	// RuleAmendmentChangedTool: the amendment's tool_id differs.
	RuleAmendmentChangedTool Rule = "amendment_changed_tool"
	// RuleAmendmentChangedActor: the amendment's actor_id differs.
	RuleAmendmentChangedActor Rule = "amendment_changed_actor"
	// RuleAmendmentChangedExecution: execution_id differs, including
	// presence versus absence.
	RuleAmendmentChangedExecution Rule = "amendment_changed_execution"
	// RuleAmendmentChangedRetry: retry_of differs, including presence
	// versus absence.
	RuleAmendmentChangedRetry Rule = "amendment_changed_retry"
	// RuleAmendmentRegressed: argument knowledge regresses (partial to
	// unknown).
	RuleAmendmentRegressed Rule = "amendment_knowledge_regressed"
	// RuleAmendmentOfComplete: a call whose arguments_status is complete is
	// amended; complete knowledge cannot change through supersedes.
	RuleAmendmentOfComplete Rule = "amendment_of_complete_call"
	// RuleResultWithoutCall: a tool_result's call_id matches neither a local
	// tool_call nor an external call binding.
	RuleResultWithoutCall Rule = "result_without_call"
	// RuleResultIndexOrder: a call's result_index values are not unique and
	// increasing in document order.
	RuleResultIndexOrder Rule = "result_index_order"
	// RuleResultAfterTerminal: a result follows its call's terminal result.
	RuleResultAfterTerminal Rule = "result_after_terminal"
)

// Streams (asif.streams/0.1). ObjectID is the stream id.
const (
	// RuleStreamDuplicateID: two streams share an id.
	RuleStreamDuplicateID Rule = "stream_duplicate_id"
	// RuleStreamEventMissing: event_id names no local event.
	RuleStreamEventMissing Rule = "stream_event_missing"
	// RuleStreamEventKind: a tool_arguments stream is not bound to a
	// tool_call, or a tool_result_text stream to a tool_result.
	RuleStreamEventKind Rule = "stream_event_kind"
	// RuleStreamCallMismatch: the stream's call_id differs from its bound
	// event's.
	RuleStreamCallMismatch Rule = "stream_call_mismatch"
	// RuleStreamResultIndexMismatch: a tool_result_text stream's
	// result_index differs from its bound result's.
	RuleStreamResultIndexMismatch Rule = "stream_result_index_mismatch"
	// RuleSegmentIndexOrder: segment indexes are negative, repeated or not
	// ascending in array order.
	RuleSegmentIndexOrder Rule = "segment_index_order"
	// RuleSegmentResourceMissing: a segment names an undeclared resource.
	RuleSegmentResourceMissing Rule = "segment_resource_missing"
	// RuleSegmentResourceNotEmbedded: a segment names a resource whose
	// availability is not embedded, or whose bytes failed verification.
	RuleSegmentResourceNotEmbedded Rule = "segment_resource_not_embedded"
	// RuleSegmentSpan: offset+length exceeds the resource's byte length.
	RuleSegmentSpan Rule = "segment_span_out_of_bounds"
	// RuleSegmentTerminalDuplicate: more than one segment is terminal.
	RuleSegmentTerminalDuplicate Rule = "segment_terminal_duplicate"
	// RuleSegmentTerminalNotLast: a terminal segment is not the last one.
	RuleSegmentTerminalNotLast Rule = "segment_terminal_not_last"
	// RuleStreamStatus: the declared status differs from the assembled
	// one (complete exactly when indexes are contiguous from zero and the
	// final segment is terminal; empty streams are partial).
	RuleStreamStatus Rule = "stream_status_mismatch"
	// RuleStreamTooLarge: the assembled stream would exceed
	// MaxStreamBytes, or all streams together MaxAssembledBytes.
	RuleStreamTooLarge Rule = "stream_too_large"
	// RuleStreamNotUTF8: a complete stream's assembled bytes are not UTF-8.
	RuleStreamNotUTF8 Rule = "stream_not_utf8"
	// RuleStreamArgumentsNotJSON: a complete tool_arguments stream does not
	// assemble to strict JSON.
	RuleStreamArgumentsNotJSON Rule = "stream_arguments_not_json"
	// RuleStreamArgumentsMismatch: a complete tool_arguments stream differs
	// (as JSON) from its bound call's arguments.
	RuleStreamArgumentsMismatch Rule = "stream_arguments_mismatch"
	// RuleStreamCompleteCallStatus: a complete tool_arguments stream is
	// bound to a call whose arguments_status is not complete.
	RuleStreamCompleteCallStatus Rule = "stream_complete_call_not_complete"
	// RuleStreamPartialCallStatus: a partial tool_arguments stream is bound
	// to a call whose arguments_status is not partial (a partial stream is
	// never an executable call).
	RuleStreamPartialCallStatus Rule = "stream_partial_call_not_partial"
	// RuleStreamTextMismatch: a complete tool_result_text stream differs
	// from its bound result's parts, which must be exactly one text part.
	RuleStreamTextMismatch Rule = "stream_text_mismatch"
)

// External bindings (asif.external-bindings/0.1). ObjectID is the binding id.
const (
	// RuleBindingDuplicate: two bindings share kind and id.
	RuleBindingDuplicate Rule = "binding_duplicate"
	// RuleBindingDuplicatesLocal: a call binding's id is a local tool_call's
	// call_id, or a request binding's id a local decision_request's
	// request_id. Amending an external call means including its authentic
	// predecessor and removing the binding.
	RuleBindingDuplicatesLocal Rule = "binding_duplicates_local"
	// RuleBindingToolUndefined: a call descriptor's tool_id has no local
	// tool definition.
	RuleBindingToolUndefined Rule = "binding_tool_undefined"
	// RuleBindingResourceMissing: a request descriptor's prompt references
	// an undeclared resource.
	RuleBindingResourceMissing Rule = "binding_resource_missing"
	// RuleBindingOptionDuplicate: a request descriptor repeats an option id.
	RuleBindingOptionDuplicate Rule = "binding_option_duplicate"
)

// References among the core records (SEMANTICS §3, §5, §7, §11). The
// schema already refuses a branch that lists an event twice. ObjectID
// is the event, branch or checkpoint id.
const (
	// RuleEventActorUndeclared: an event's actor_id names no participant.
	RuleEventActorUndeclared Rule = "event_actor_undeclared"
	// RuleEventExecutionUndeclared: an event's execution_id names no
	// execution.
	RuleEventExecutionUndeclared Rule = "event_execution_undeclared"
	// RuleEventCauseMissing: a local entry of causes names no event of
	// the document.
	RuleEventCauseMissing Rule = "event_cause_missing"
	// RuleEventCauseOrder: a local cause is not serialized before the
	// event (causal edges point to earlier events, so they cannot form a
	// cycle).
	RuleEventCauseOrder Rule = "event_cause_order"
	// RuleBranchHead: head_event_id is not the branch's final selected
	// event (or is not null for an empty branch).
	RuleBranchHead Rule = "branch_head_mismatch"
	// RuleBranchCauseOrder: an event's local cause is selected in the same
	// branch after it.
	RuleBranchCauseOrder Rule = "branch_cause_order"
	// RuleCheckpointBranchMissing: a checkpoint's branch_id names no
	// branch.
	RuleCheckpointBranchMissing Rule = "checkpoint_branch_missing"
	// RuleCheckpointEventNotInBranch: a checkpoint's at_event_id is not
	// selected by its branch.
	RuleCheckpointEventNotInBranch Rule = "checkpoint_event_not_in_branch"
	// RuleCheckpointCallUnknown: an open_calls entry names a call_id with
	// no local tool_call and no external call binding.
	RuleCheckpointCallUnknown Rule = "checkpoint_call_unknown"
	// RuleCheckpointTaskUnknown: a tasks entry names a (task_id,
	// revision) pair that no task_update carries.
	RuleCheckpointTaskUnknown Rule = "checkpoint_task_unknown"
)

// Task revisions and dependencies (SEMANTICS §15, §16). ObjectID is the
// task_update event's id.
const (
	// RuleTaskDuplicateRevision: two task_update events carry the same
	// (task_id, revision).
	RuleTaskDuplicateRevision Rule = "task_duplicate_revision"
	// RuleTaskRevisionOrder: previous_revision is not strictly smaller
	// than revision.
	RuleTaskRevisionOrder Rule = "task_revision_order"
	// RuleTaskPredecessorMismatch: a branch already selects a revision of
	// the task and the update does not name that revision in
	// previous_revision (revision transitions are direct, never skipped).
	RuleTaskPredecessorMismatch Rule = "task_predecessor_mismatch"
	// RuleTaskPredecessorGap: a task's first selected update names a
	// predecessor the branch does not select while the tasks coverage
	// record is not partial.
	RuleTaskPredecessorGap Rule = "task_predecessor_gap"
	// RuleTaskReopenWithoutReason: a task whose selected state is
	// completed, failed, cancelled or superseded becomes proposed, pending
	// or in_progress without a reopen_reason.
	RuleTaskReopenWithoutReason Rule = "task_reopen_without_reason"
	// RuleTaskDependencyMissing: dependencies names a task_id that no
	// task_update of the document carries.
	RuleTaskDependencyMissing Rule = "task_dependency_missing"
	// RuleTaskDependencySelf: a task lists itself in dependencies.
	RuleTaskDependencySelf Rule = "task_dependency_self"
	// RuleTaskDependencyCycle: after this selected update, the dependency
	// edges of the branch's current task revisions form a cycle.
	RuleTaskDependencyCycle Rule = "task_dependency_cycle"
)

// RuleError is one refusal of a semantic rule. It names the rule and the
// object it applies to, never the object's content.
type RuleError struct {
	// Rule is the violated rule; errors.Is(err, rule) matches it.
	Rule Rule
	// Object is the kind of object: "resource", "event", "branch",
	// "checkpoint", "stream", "external_binding" or "required_features".
	Object string
	// ObjectID is the object's id (for a stream, the stream id; for a
	// binding, its id; for required_features, the feature name).
	ObjectID string
	// Segment is the zero-based position in the stream's segments array of
	// the segment at fault, or -1 when the rule concerns the whole object.
	Segment int
}

// Error names the rule, the object kind and its id (quoted, at most 64
// bytes of it).
func (e *RuleError) Error() string {
	if e.Segment >= 0 {
		return fmt.Sprintf("asif: %s %s segment %d: %s", e.Object, quoteBounded(e.ObjectID), e.Segment, e.Rule)
	}
	return fmt.Sprintf("asif: %s %s: %s", e.Object, quoteBounded(e.ObjectID), e.Rule)
}

// Is reports whether target is this error's Rule.
func (e *RuleError) Is(target error) bool {
	r, ok := target.(Rule)
	return ok && r == e.Rule
}

// Unwrap returns the Rule, so errors.As(err, new(asif.Rule)) finds it.
func (e *RuleError) Unwrap() error { return e.Rule }

const maxQuoted = 64

// quoteBounded quotes at most maxQuoted bytes of s (cut on a rune
// boundary), so an identifier never floods a message with control
// characters or megabytes.
func quoteBounded(s string) string {
	if len(s) <= maxQuoted {
		return fmt.Sprintf("%q", s)
	}
	cut := maxQuoted
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q…", s[:cut])
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// MaxRefusals bounds the *RuleError values one check keeps (1000), so a
// document with a million faulty segments cannot make the error itself
// unbounded.
const MaxRefusals = 1000

// TooManyRefusalsError ends a joined refusal list that reached MaxRefusals.
type TooManyRefusalsError struct {
	// Dropped counts the refusals found but not kept.
	Dropped int
}

// Error says how many refusals were left out.
func (e *TooManyRefusalsError) Error() string {
	return fmt.Sprintf("asif: %d further rule refusal(s) not listed (MaxRefusals is %d)", e.Dropped, MaxRefusals)
}

// Rules returns every rule this package checks, in the order of their
// declaration (a fresh slice on every call).
func Rules() []Rule {
	return []Rule{
		RuleFeatureUnsupported,
		RuleResourceDuplicateID,
		RuleResourceBase64,
		RuleResourceBytes,
		RuleResourceSHA256,
		RuleResourcePath,
		RuleEventDuplicateID,
		RuleEventSequence,
		RuleBranchEventMissing,
		RuleBranchCallVersion,
		RuleCallToolUndefined,
		RuleCallDuplicateIdentity,
		RuleCallRetryOfSelf,
		RuleAmendmentPredecessorMissing,
		RuleAmendmentPredecessorInvalid,
		RuleAmendmentChangedCallID,
		RuleAmendmentChangedTool,
		RuleAmendmentChangedActor,
		RuleAmendmentChangedExecution,
		RuleAmendmentChangedRetry,
		RuleAmendmentRegressed,
		RuleAmendmentOfComplete,
		RuleResultWithoutCall,
		RuleResultIndexOrder,
		RuleResultAfterTerminal,
		RuleStreamDuplicateID,
		RuleStreamEventMissing,
		RuleStreamEventKind,
		RuleStreamCallMismatch,
		RuleStreamResultIndexMismatch,
		RuleSegmentIndexOrder,
		RuleSegmentResourceMissing,
		RuleSegmentResourceNotEmbedded,
		RuleSegmentSpan,
		RuleSegmentTerminalDuplicate,
		RuleSegmentTerminalNotLast,
		RuleStreamStatus,
		RuleStreamTooLarge,
		RuleStreamNotUTF8,
		RuleStreamArgumentsNotJSON,
		RuleStreamArgumentsMismatch,
		RuleStreamCompleteCallStatus,
		RuleStreamPartialCallStatus,
		RuleStreamTextMismatch,
		RuleBindingDuplicate,
		RuleBindingDuplicatesLocal,
		RuleBindingToolUndefined,
		RuleBindingResourceMissing,
		RuleBindingOptionDuplicate,
		RuleEventActorUndeclared,
		RuleEventExecutionUndeclared,
		RuleEventCauseMissing,
		RuleEventCauseOrder,
		RuleBranchHead,
		RuleBranchCauseOrder,
		RuleCheckpointBranchMissing,
		RuleCheckpointEventNotInBranch,
		RuleCheckpointCallUnknown,
		RuleCheckpointTaskUnknown,
		RuleTaskDuplicateRevision,
		RuleTaskRevisionOrder,
		RuleTaskPredecessorMismatch,
		RuleTaskPredecessorGap,
		RuleTaskReopenWithoutReason,
		RuleTaskDependencyMissing,
		RuleTaskDependencySelf,
		RuleTaskDependencyCycle,
	}
}
