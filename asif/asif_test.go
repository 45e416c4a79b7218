package asif_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"go.uber.org/goleak"

	"github.com/skulkrt/skulk/asif"
	"github.com/skulkrt/skulk/internal/strictjson"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	partialExample   = "testdata/tool-call-partial.session.json"
	completedExample = "testdata/tool-call-completed.session.json"
)

func readFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	require.NoError(t, err)
	return b
}

func TestExamplesCheckClean(t *testing.T) {
	for _, name := range []string{partialExample, completedExample} {
		t.Run(filepath.Base(name), func(t *testing.T) {
			report, err := asif.Check(readFile(t, name), asif.Options{})
			require.NoError(t, err, "Check")
			require.Falsef(t, report == nil || report.Version != asif.Version, "report = %+v", report)
		})
	}
}

func TestPartialExampleAssembly(t *testing.T) {
	report, err := asif.Check(readFile(t, partialExample), asif.Options{})
	require.NoError(t, err)
	s := report.Stream("stream-partial")
	require.False(t, s == nil, "stream-partial missing from report")
	require.Falsef(t, s.Status != asif.StreamPartial || s.Executable, "stream-partial: status %s executable %v; want partial, not executable", s.Status, s.Executable)
	if got := string(s.Bytes); got != `{"document_id":"meeting-` || s.Size != 24 {
		require.FailNow(t, fmt.Sprintf("prefix = %q (size %d)", got, s.Size))
	}
	calls := report.Branches[0].Calls
	if len(calls) != 1 || calls[0].ArgumentsStatus != asif.ArgumentsPartial || calls[0].Terminal || calls[0].EventID != "call-partial" {
		require.FailNow(t, fmt.Sprintf("selected state = %+v", calls[0]))
	}
}

func TestCompletedExampleAssembly(t *testing.T) {
	data := readFile(t, completedExample)
	report, err := asif.Check(data, asif.Options{})
	require.NoError(t, err)
	complete := report.Stream("stream-complete")
	require.Falsef(t, complete == nil || complete.Status != asif.StreamComplete || !complete.Executable, "stream-complete = %+v", complete)
	// The complete stream equals the amended call's arguments, as JSON.
	var doc struct {
		Events []struct {
			ID   string `json:"id"`
			Data struct {
				Arguments json.RawMessage `json:"arguments"`
			} `json:"data"`
		} `json:"events"`
	}
	require.NoError(t, json.Unmarshal(data, &doc))
	var amended json.RawMessage
	for _, e := range doc.Events {
		if e.ID == "call-complete" {
			amended = e.Data.Arguments
		}
	}
	want, err := strictjson.Parse(amended)
	require.NoError(t, err)
	got, err := strictjson.Parse(complete.Bytes)
	require.NoError(t, err, "assembled stream is not JSON")
	require.Falsef(t, !strictjson.Equal(got, want), "assembled %s, amended call has %s", complete.Bytes, amended)
	// The earlier partial stream is kept, still partial.
	if p := report.Stream("stream-partial"); p == nil || p.Status != asif.StreamPartial || p.Executable || p.Size != 24 {
		require.FailNow(t, fmt.Sprintf("stream-partial = %+v", p))
	}
	// Selected state: the amendment, closed by the late terminal result.
	calls := report.Branches[0].Calls
	require.EqualValuesf(t, 1, len(calls), "calls = %d", len(calls))
	c := calls[0]
	if c.CallID != "call-1" || c.EventID != "call-complete" || c.ArgumentsStatus != asif.ArgumentsComplete ||
		!c.Terminal || c.Outcome != asif.OutcomeSuccess || c.TerminalEventID != "result-late" || c.Results != 1 ||
		c.External != nil || string(c.Arguments) != `{"document_id":"meeting-42"}` {
		require.FailNow(t, fmt.Sprintf("selected state = %+v (arguments %s)", c, c.Arguments))
	}
}

// ---- mutation helpers (operate on the decoded example tree) ----

type tree = map[string]any

func load(t testing.TB, name string) tree {
	t.Helper()
	v, err := strictjson.Parse(readFile(t, name))
	require.NoError(t, err)
	return v.(tree)
}

func encode(t testing.TB, doc tree) []byte {
	t.Helper()
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	return b
}

func list(doc tree, key string) []any { l, _ := doc[key].([]any); return l }

func byID(doc tree, collection, id string) tree {
	for _, x := range list(doc, collection) {
		if m := x.(tree); m["id"] == id {
			return m
		}
	}
	panic("no " + collection + " " + id)
}

func data(doc tree, eventID string) tree { return byID(doc, "events", eventID)["data"].(tree) }

func segment(doc tree, streamID string, i int) tree {
	return byID(doc, "streams", streamID)["segments"].([]any)[i].(tree)
}

func num(n int) json.Number { return json.Number(jsonInt(n)) }

func jsonInt(n int) string { b, _ := json.Marshal(n); return string(b) }

// setText replaces a resource's text with a correct length and digest.
func setText(doc tree, id, text string) {
	r := byID(doc, "resources", id)
	sum := sha256.Sum256([]byte(text))
	r["text"], r["bytes"], r["sha256"] = text, num(len(text)), hex.EncodeToString(sum[:])
}

// setData replaces a resource's representation with base64 data.
func setData(doc tree, id string, b []byte) {
	r := byID(doc, "resources", id)
	delete(r, "text")
	sum := sha256.Sum256(b)
	r["data"], r["bytes"], r["sha256"] = base64.StdEncoding.EncodeToString(b), num(len(b)), hex.EncodeToString(sum[:])
}

func appendTo(doc tree, key string, v any) { doc[key] = append(list(doc, key), v) }

func addEvent(doc tree, e tree) {
	appendTo(doc, "events", e)
	br := list(doc, "branches")[0].(tree)
	br["event_ids"] = append(br["event_ids"].([]any), e["id"])
	br["head_event_id"] = e["id"]
	cp := list(doc, "checkpoints")[0].(tree)
	cp["at_event_id"] = e["id"]
}

func removeEvents(doc tree, ids ...string) {
	drop := map[string]bool{}
	for _, id := range ids {
		drop[id] = true
	}
	var kept, branchIDs []any
	for _, e := range list(doc, "events") {
		if !drop[e.(tree)["id"].(string)] {
			kept = append(kept, e)
		}
	}
	doc["events"] = kept
	br := list(doc, "branches")[0].(tree)
	for _, id := range br["event_ids"].([]any) {
		if !drop[id.(string)] {
			branchIDs = append(branchIDs, id)
		}
	}
	br["event_ids"] = branchIDs
}

func synthetic() tree {
	return tree{"mode": "synthetic", "producer": "asif-test", "method": "mutation", "inputs": []any{}}
}

func callBinding(id, tool string) tree {
	return tree{
		"kind": "call", "id": id,
		"source":     tree{"session_id": "session-call-progression", "capture_id": "capture-earlier", "event_id": "call-earlier"},
		"descriptor": tree{"tool_id": tool, "arguments": tree{}, "arguments_status": "partial"},
	}
}

func addBinding(doc tree, b tree) {
	appendTo(doc, "external_bindings", b)
	for _, f := range list(doc, "required_features") {
		if f == asif.FeatureExternalBindings {
			return
		}
	}
	appendTo(doc, "required_features", asif.FeatureExternalBindings)
}

// splitUTF8 rewrites the completed example so that "é" (C3 A9) is split
// across the two argument fragments.
func splitUTF8(doc tree) {
	setData(doc, "arguments-prefix", []byte("{\"document_id\":\"meeting-\xc3"))
	setData(doc, "arguments-suffix", []byte("\xa9\"}"))
	segment(doc, "stream-partial", 0)["length"] = num(25)
	segment(doc, "stream-complete", 0)["length"] = num(25)
	segment(doc, "stream-complete", 1)["length"] = num(3)
	data(doc, "call-complete")["arguments"] = tree{"document_id": "meeting-é"}
}

func TestSplitUTF8DecodedAfterAssembly(t *testing.T) {
	doc := load(t, completedExample)
	splitUTF8(doc)
	report, err := asif.Check(encode(t, doc), asif.Options{})
	require.NoError(t, err, "split UTF-8 across segments refused")
	s := report.Stream("stream-complete")
	require.Falsef(t, string(s.Bytes) != `{"document_id":"meeting-é"}` || !s.Executable, "assembled %q executable %v", s.Bytes, s.Executable)
	// The partial prefix ends inside the sequence: it is kept as bytes.
	if p := report.Stream("stream-partial"); p.Size != 25 || p.Bytes[24] != 0xc3 {
		require.FailNow(t, fmt.Sprintf("partial prefix = %q", p.Bytes))
	}
}

func TestRuleMutations(t *testing.T) {
	cases := []struct {
		name   string
		base   string
		mutate func(doc tree)
		rule   asif.Rule
		object string // the ObjectID the refusal must name
	}{
		// streams
		{"missing segment", completedExample, func(d tree) {
			segment(d, "stream-complete", 1)["index"] = num(2)
		}, asif.RuleStreamStatus, "stream-complete"},
		{"span out of bounds", completedExample, func(d tree) {
			segment(d, "stream-complete", 1)["length"] = num(5)
		}, asif.RuleSegmentSpan, "stream-complete"},
		{"span offset out of bounds", completedExample, func(d tree) {
			segment(d, "stream-complete", 1)["offset"] = num(4)
			segment(d, "stream-complete", 1)["length"] = num(1)
		}, asif.RuleSegmentSpan, "stream-complete"},
		{"two terminal segments", completedExample, func(d tree) {
			segment(d, "stream-complete", 0)["terminal"] = true
		}, asif.RuleSegmentTerminalDuplicate, "stream-complete"},
		{"terminal not last", completedExample, func(d tree) {
			segment(d, "stream-complete", 0)["terminal"] = true
			segment(d, "stream-complete", 1)["terminal"] = false
		}, asif.RuleSegmentTerminalNotLast, "stream-complete"},
		{"complete without terminal", completedExample, func(d tree) {
			segment(d, "stream-complete", 1)["terminal"] = false
		}, asif.RuleStreamStatus, "stream-complete"},
		{"contiguous terminal declared partial", completedExample, func(d tree) {
			byID(d, "streams", "stream-complete")["status"] = "partial"
		}, asif.RuleStreamStatus, "stream-complete"},
		{"empty stream declared complete", completedExample, func(d tree) {
			byID(d, "streams", "stream-complete")["segments"] = []any{}
		}, asif.RuleStreamStatus, "stream-complete"},
		{"duplicate segment index", completedExample, func(d tree) {
			segment(d, "stream-complete", 1)["index"] = num(0)
		}, asif.RuleSegmentIndexOrder, "stream-complete"},
		{"unordered segment indexes", completedExample, func(d tree) {
			s := byID(d, "streams", "stream-complete")
			segs := s["segments"].([]any)
			s["segments"] = []any{segs[1], segs[0]}
		}, asif.RuleSegmentIndexOrder, "stream-complete"},
		{"duplicate stream id", completedExample, func(d tree) {
			byID(d, "streams", "stream-complete")["id"] = "stream-partial"
		}, asif.RuleStreamDuplicateID, "stream-partial"},
		{"stream event missing", completedExample, func(d tree) {
			byID(d, "streams", "stream-complete")["event_id"] = "no-such-event"
		}, asif.RuleStreamEventMissing, "stream-complete"},
		{"stream bound to wrong event kind", completedExample, func(d tree) {
			byID(d, "streams", "stream-complete")["event_id"] = "result-late"
		}, asif.RuleStreamEventKind, "stream-complete"},
		{"stream call id mismatch", completedExample, func(d tree) {
			byID(d, "streams", "stream-complete")["call_id"] = "call-2"
		}, asif.RuleStreamCallMismatch, "stream-complete"},
		{"complete stream differs from call arguments", completedExample, func(d tree) {
			data(d, "call-complete")["arguments"] = tree{"document_id": "meeting-43"}
		}, asif.RuleStreamArgumentsMismatch, "stream-complete"},
		{"complete stream bound to partial call", completedExample, func(d tree) {
			byID(d, "streams", "stream-complete")["event_id"] = "call-partial"
		}, asif.RuleStreamCompleteCallStatus, "stream-complete"},
		{"partial stream bound to complete call", completedExample, func(d tree) {
			byID(d, "streams", "stream-partial")["event_id"] = "call-complete"
		}, asif.RuleStreamPartialCallStatus, "stream-partial"},
		{"complete stream not JSON", completedExample, func(d tree) {
			setText(d, "arguments-suffix", `42"`)
			segment(d, "stream-complete", 1)["length"] = num(3)
		}, asif.RuleStreamArgumentsNotJSON, "stream-complete"},
		{"split UTF-8 never completed", completedExample, func(d tree) {
			splitUTF8(d)
			setData(d, "arguments-suffix", []byte("\"}"))
			segment(d, "stream-complete", 1)["length"] = num(2)
		}, asif.RuleStreamNotUTF8, "stream-complete"},
		{"text stream differs from result", completedExample, func(d tree) {
			addTextStream(d, "Meeting notes: agree on the workshop outline!")
		}, asif.RuleStreamTextMismatch, "stream-text"},
		{"text stream wrong result index", completedExample, func(d tree) {
			addTextStream(d, "Meeting notes: agree on the workshop outline.")
			byID(d, "streams", "stream-text")["result_index"] = num(1)
		}, asif.RuleStreamResultIndexMismatch, "stream-text"},
		{"segment resource missing", completedExample, func(d tree) {
			segment(d, "stream-complete", 1)["resource_id"] = "no-such-resource"
		}, asif.RuleSegmentResourceMissing, "stream-complete"},
		{"segment resource not embedded", completedExample, func(d tree) {
			r := byID(d, "resources", "arguments-suffix")
			for _, k := range []string{"text", "bytes", "sha256"} {
				delete(r, k)
			}
			r["availability"], r["explanation"] = "unavailable", "lost"
		}, asif.RuleSegmentResourceNotEmbedded, "stream-complete"},

		// resource integrity
		{"bad sha256", completedExample, func(d tree) {
			byID(d, "resources", "arguments-suffix")["sha256"] = strings.Repeat("0", 64)
		}, asif.RuleResourceSHA256, "arguments-suffix"},
		{"bad bytes", completedExample, func(d tree) {
			byID(d, "resources", "arguments-suffix")["bytes"] = num(5)
		}, asif.RuleResourceBytes, "arguments-suffix"},
		{"bad base64", completedExample, func(d tree) {
			setData(d, "arguments-suffix", []byte(`42"}`))
			byID(d, "resources", "arguments-suffix")["data"] = "NDIifQ=" // bad padding
		}, asif.RuleResourceBase64, "arguments-suffix"},
		{"base64 with line break", completedExample, func(d tree) {
			setData(d, "arguments-suffix", []byte(`42"}`))
			byID(d, "resources", "arguments-suffix")["data"] = "NDIi\nfQ=="
		}, asif.RuleResourceBase64, "arguments-suffix"},
		{"duplicate resource id", completedExample, func(d tree) {
			byID(d, "resources", "arguments-suffix")["id"] = "arguments-prefix"
		}, asif.RuleResourceDuplicateID, "arguments-prefix"},
		{"path resource without directory", completedExample, func(d tree) {
			r := byID(d, "resources", "arguments-suffix")
			delete(r, "text")
			r["path"] = "suffix.json"
		}, asif.RuleResourcePath, "arguments-suffix"},

		// tool-call progression
		{"duplicate call identity", completedExample, func(d tree) {
			delete(byID(d, "events", "call-complete"), "supersedes")
		}, asif.RuleCallDuplicateIdentity, "call-complete"},
		{"amendment changing the tool", completedExample, func(d tree) {
			appendTo(d, "tools", tree{"id": "other-tool", "name": "example.other", "description": "", "input_schema": true})
			data(d, "call-complete")["tool_id"] = "other-tool"
		}, asif.RuleAmendmentChangedTool, "call-complete"},
		{"amendment changing the call id", completedExample, func(d tree) {
			data(d, "call-complete")["call_id"] = "call-2"
			byID(d, "streams", "stream-complete")["call_id"] = "call-2"
			data(d, "result-late")["call_id"] = "call-2"
		}, asif.RuleAmendmentChangedCallID, "call-complete"},
		{"amendment changing the actor", completedExample, func(d tree) {
			byID(d, "events", "call-complete")["actor_id"] = "person"
		}, asif.RuleAmendmentChangedActor, "call-complete"},
		{"amendment dropping the execution", completedExample, func(d tree) {
			delete(byID(d, "events", "call-complete"), "execution_id")
		}, asif.RuleAmendmentChangedExecution, "call-complete"},
		{"amendment adding a retry relation", completedExample, func(d tree) {
			data(d, "call-complete")["retry_of"] = "call-0"
		}, asif.RuleAmendmentChangedRetry, "call-complete"},
		{"regression to unknown", completedExample, func(d tree) {
			data(d, "call-complete")["arguments_status"] = "unknown"
			byID(d, "streams", "stream-complete")["status"] = "partial"
			segment(d, "stream-complete", 1)["terminal"] = false
		}, asif.RuleAmendmentRegressed, "call-complete"},
		{"amending a complete call", completedExample, func(d tree) {
			addEvent(d, tree{
				"id": "call-again", "sequence": num(4), "actor_id": "agent", "kind": "tool_call",
				"causes": []any{}, "provenance": synthetic(), "execution_id": "run-1",
				"supersedes": tree{"event_id": "call-complete"},
				"data":       tree{"call_id": "call-1", "tool_id": "read-notes", "arguments": tree{"document_id": "x"}, "arguments_status": "complete"},
			})
		}, asif.RuleAmendmentOfComplete, "call-again"},
		{"amendment without its local predecessor", completedExample, func(d tree) {
			removeEvents(d, "call-partial")
			d["streams"] = []any{byID(d, "streams", "stream-complete")}
			byID(d, "events", "call-complete")["causes"] = []any{}
			byID(d, "events", "call-complete")["provenance"] = synthetic()
			byID(d, "events", "call-complete")["supersedes"] = tree{
				"event_id": "call-partial", "session_id": "session-call-progression", "capture_id": "capture-call-partial",
			}
		}, asif.RuleAmendmentPredecessorMissing, "call-complete"},
		{"amendment of an unknown event", completedExample, func(d tree) {
			byID(d, "events", "call-complete")["supersedes"] = tree{"event_id": "no-such-event"}
		}, asif.RuleAmendmentPredecessorMissing, "call-complete"},
		{"amendment of a message", completedExample, func(d tree) {
			byID(d, "events", "call-complete")["supersedes"] = tree{"event_id": "e1"}
		}, asif.RuleAmendmentPredecessorInvalid, "call-complete"},
		{"call of an undefined tool", completedExample, func(d tree) {
			data(d, "call-partial")["tool_id"] = "nope"
			data(d, "call-complete")["tool_id"] = "nope"
		}, asif.RuleCallToolUndefined, "call-partial"},
		{"retry of itself", completedExample, func(d tree) {
			data(d, "call-partial")["retry_of"] = "call-1"
			data(d, "call-complete")["retry_of"] = "call-1"
		}, asif.RuleCallRetryOfSelf, "call-partial"},
		{"result without call", completedExample, func(d tree) {
			data(d, "result-late")["call_id"] = "call-9"
		}, asif.RuleResultWithoutCall, "result-late"},
		{"result after terminal", completedExample, func(d tree) {
			addEvent(d, tree{
				"id": "result-again", "sequence": num(4), "actor_id": "agent", "kind": "tool_result",
				"causes": []any{}, "provenance": synthetic(),
				"data": tree{"call_id": "call-1", "result_index": num(1), "terminal": true, "outcome": "error", "parts": []any{}},
			})
		}, asif.RuleResultAfterTerminal, "result-again"},
		{"result index not increasing", completedExample, func(d tree) {
			data(d, "result-late")["result_index"] = num(3)
			addEvent(d, tree{
				"id": "result-early", "sequence": num(4), "actor_id": "agent", "kind": "tool_result",
				"causes": []any{}, "provenance": synthetic(),
				"data": tree{"call_id": "call-1", "result_index": num(2), "terminal": false, "outcome": "unknown", "parts": []any{}},
			})
		}, asif.RuleResultIndexOrder, "result-early"},
		{"duplicate event id", completedExample, func(d tree) {
			byID(d, "events", "result-late")["id"] = "e1"
		}, asif.RuleEventDuplicateID, "e1"},
		{"sequence not ascending", completedExample, func(d tree) {
			byID(d, "events", "result-late")["sequence"] = num(1)
		}, asif.RuleEventSequence, "result-late"},
		{"branch selects call versions out of order", completedExample, func(d tree) {
			br := list(d, "branches")[0].(tree)
			br["event_ids"] = []any{"e1", "call-complete", "call-partial", "result-late"}
		}, asif.RuleBranchCallVersion, "main"},
		{"branch selects unknown event", completedExample, func(d tree) {
			br := list(d, "branches")[0].(tree)
			br["event_ids"] = append(br["event_ids"].([]any), "ghost")
			br["head_event_id"] = "ghost"
		}, asif.RuleBranchEventMissing, "main"},

		// external bindings
		{"binding duplicating a local call", completedExample, func(d tree) {
			addBinding(d, callBinding("call-1", "read-notes"))
		}, asif.RuleBindingDuplicatesLocal, "call-1"},
		{"two bindings for one call", completedExample, func(d tree) {
			addBinding(d, callBinding("call-9", "read-notes"))
			addBinding(d, callBinding("call-9", "read-notes"))
		}, asif.RuleBindingDuplicate, "call-9"},
		{"binding of an undefined tool", completedExample, func(d tree) {
			addBinding(d, callBinding("call-9", "nope"))
		}, asif.RuleBindingToolUndefined, "call-9"},
		{"request binding duplicate option", completedExample, func(d tree) {
			addBinding(d, tree{
				"kind": "request", "id": "req-1",
				"source": tree{"session_id": "s", "capture_id": "c", "event_id": "e"},
				"descriptor": tree{"decision_kind": "approval", "prompt": []any{},
					"options": []any{tree{"id": "yes", "label": "Yes"}, tree{"id": "yes", "label": "Also yes"}}},
			})
		}, asif.RuleBindingOptionDuplicate, "req-1"},
		{"request binding undeclared resource", completedExample, func(d tree) {
			addBinding(d, tree{
				"kind": "request", "id": "req-1",
				"source": tree{"session_id": "s", "capture_id": "c", "event_id": "e"},
				"descriptor": tree{"decision_kind": "approval",
					"prompt": []any{tree{"kind": "resource", "resource_id": "nope"}}, "options": []any{}},
			})
		}, asif.RuleBindingResourceMissing, "req-1"},
		{"unsupported required feature", completedExample, func(d tree) {
			appendTo(d, "required_features", "example.unknown/1")
		}, asif.RuleFeatureUnsupported, "example.unknown/1"},
		// references
		{"undeclared actor", completedExample, func(d tree) {
			byID(d, "events", "e1")["actor_id"] = "nobody"
		}, asif.RuleEventActorUndeclared, "e1"},
		{"undeclared execution", completedExample, func(d tree) {
			byID(d, "events", "result-late")["execution_id"] = "run-9"
		}, asif.RuleEventExecutionUndeclared, "result-late"},
		{"dangling cause", completedExample, func(d tree) {
			byID(d, "events", "result-late")["causes"] = []any{tree{"event_id": "nope"}}
		}, asif.RuleEventCauseMissing, "result-late"},
		{"cause serialized later", completedExample, func(d tree) {
			byID(d, "events", "e1")["causes"] = []any{tree{"event_id": "result-late"}}
		}, asif.RuleEventCauseOrder, "e1"},
		{"cause selected later in a branch", completedExample, func(d tree) {
			appendTo(d, "branches", tree{"id": "alt", "event_ids": []any{"call-partial", "e1"}, "head_event_id": "e1"})
		}, asif.RuleBranchCauseOrder, "alt"},
		{"branch head not its last event", completedExample, func(d tree) {
			list(d, "branches")[0].(tree)["head_event_id"] = "e1"
		}, asif.RuleBranchHead, "main"},
		{"checkpoint of no branch", completedExample, func(d tree) {
			list(d, "checkpoints")[0].(tree)["branch_id"] = "nope"
		}, asif.RuleCheckpointBranchMissing, "checkpoint-completed"},
		{"checkpoint at an event outside its branch", completedExample, func(d tree) {
			list(d, "checkpoints")[0].(tree)["at_event_id"] = "nope"
		}, asif.RuleCheckpointEventNotInBranch, "checkpoint-completed"},
		{"checkpoint open call unknown", completedExample, func(d tree) {
			list(d, "checkpoints")[0].(tree)["open_calls"] = []any{tree{"call_id": "call-9", "state": "pending"}}
		}, asif.RuleCheckpointCallUnknown, "checkpoint-completed"},
		{"checkpoint task revision unknown", completedExample, func(d tree) {
			addTask(d, "t1-r1", "t1", 1, "pending", nil)
			list(d, "checkpoints")[0].(tree)["tasks"] = []any{tree{"task_id": "t1", "revision": num(2)}}
		}, asif.RuleCheckpointTaskUnknown, "checkpoint-completed"},
		// tasks
		{"duplicate task revision", completedExample, func(d tree) {
			addTask(d, "t1-a", "t1", 1, "pending", nil)
			addTask(d, "t1-b", "t1", 1, "in_progress", tree{"previous_revision": num(1)})
		}, asif.RuleTaskDuplicateRevision, "t1-b"},
		{"previous revision not smaller", completedExample, func(d tree) {
			addTask(d, "t1-r2", "t1", 2, "pending", tree{"previous_revision": num(2)})
		}, asif.RuleTaskRevisionOrder, "t1-r2"},
		{"revision skips the selected predecessor", completedExample, func(d tree) {
			addTask(d, "t1-r1", "t1", 1, "pending", nil)
			addTask(d, "t1-r3", "t1", 3, "in_progress", tree{"previous_revision": num(2)})
		}, asif.RuleTaskPredecessorMismatch, "t1-r3"},
		{"revision names no predecessor", completedExample, func(d tree) {
			addTask(d, "t1-r1", "t1", 1, "pending", nil)
			addTask(d, "t1-r2", "t1", 2, "in_progress", nil)
		}, asif.RuleTaskPredecessorMismatch, "t1-r2"},
		{"omitted predecessor without partial coverage", completedExample, func(d tree) {
			addTask(d, "t1-r2", "t1", 2, "pending", tree{"previous_revision": num(1)})
		}, asif.RuleTaskPredecessorGap, "t1-r2"},
		{"failed task reopened without a reason", completedExample, func(d tree) {
			addTask(d, "t1-r1", "t1", 1, "failed", nil)
			addTask(d, "t1-r2", "t1", 2, "pending", tree{"previous_revision": num(1)})
		}, asif.RuleTaskReopenWithoutReason, "t1-r2"},
		{"cancelled task reopened without a reason", completedExample, func(d tree) {
			addTask(d, "t1-r1", "t1", 1, "cancelled", nil)
			addTask(d, "t1-r2", "t1", 2, "in_progress", tree{"previous_revision": num(1)})
		}, asif.RuleTaskReopenWithoutReason, "t1-r2"},
		{"dangling dependency", completedExample, func(d tree) {
			addTask(d, "t1-r1", "t1", 1, "pending", tree{"dependencies": []any{"t9"}})
		}, asif.RuleTaskDependencyMissing, "t1-r1"},
		{"self dependency", completedExample, func(d tree) {
			addTask(d, "t1-r1", "t1", 1, "pending", tree{"dependencies": []any{"t1"}})
		}, asif.RuleTaskDependencySelf, "t1-r1"},
		{"dependency cycle", completedExample, func(d tree) {
			addTask(d, "t1-r1", "t1", 1, "pending", tree{"dependencies": []any{"t2"}})
			addTask(d, "t2-r1", "t2", 1, "pending", tree{"dependencies": []any{"t3"}})
			addTask(d, "t3-r1", "t3", 1, "pending", tree{"dependencies": []any{"t1"}})
		}, asif.RuleTaskDependencyCycle, "t3-r1"},
	}
	covered := map[asif.Rule]bool{
		asif.RuleStreamTooLarge: true, // TestStreamTooLarge: needs > 64 MiB of assembly
	}
	for _, tc := range cases {
		covered[tc.rule] = true
	}
	for _, r := range asif.Rules() {
		assert.Falsef(t, !covered[r], "rule %s has no mutation case", r)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc := load(t, tc.base)
			tc.mutate(doc)
			report, err := asif.Check(encode(t, doc), asif.Options{})
			require.Falsef(t, err == nil, "mutation accepted; want %s", tc.rule)
			require.Falsef(t, report == nil, "no report; refused before the rules: %v", err)
			require.ErrorIsf(t, err, tc.rule, "refusal does not include %s", tc.rule)
			require.Falsef(t, !namesObject(err, tc.rule, tc.object), "no %s refusal names %q: %v", tc.rule, tc.object, err)
		})
	}
}

// namesObject reports whether some *RuleError in the joined err has rule
// and objectID.
func namesObject(err error, rule asif.Rule, objectID string) bool {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	for _, e := range errs {
		var re *asif.RuleError
		if errors.As(e, &re) && re.Rule == rule && re.ObjectID == objectID {
			return true
		}
	}
	return false
}

// addTask appends a task_update event (sequence after every other) to the
// main branch; extra holds optional data fields.
func addTask(d tree, id, taskID string, revision int, status string, extra tree) {
	dt := tree{"task_id": taskID, "revision": num(revision), "status": status, "parts": []any{}}
	for k, v := range extra {
		dt[k] = v
	}
	addEvent(d, tree{
		"id": id, "sequence": num(100 + len(list(d, "events"))), "actor_id": "agent", "kind": "task_update",
		"causes": []any{}, "provenance": synthetic(), "data": dt,
	})
}

// TestTaskHistoriesAccepted holds the task rules to what SEMANTICS §16
// allows: reopening with a reason, a dependency list replaced by a later
// revision (a cycle only in the union of revisions is no cycle), forward
// declarations, revision numbers with gaps, an omitted predecessor under
// partial tasks coverage, and checkpoint task entries of exact revisions.
func TestTaskHistoriesAccepted(t *testing.T) {
	d := load(t, completedExample)
	for _, c := range list(d, "coverage") {
		if c.(tree)["scope"] == "tasks" {
			c.(tree)["status"], c.(tree)["detail"] = "partial", "Task history before revision 4 of t0 was not captured."
		}
	}
	addTask(d, "t0-r4", "t0", 4, "in_progress", tree{"previous_revision": num(3)})
	addTask(d, "t1-r1", "t1", 1, "pending", tree{"dependencies": []any{"t2"}})
	addTask(d, "t1-r2", "t1", 2, "failed", tree{"previous_revision": num(1), "dependencies": []any{}})
	addTask(d, "t2-r1", "t2", 1, "pending", tree{"dependencies": []any{"t1"}})
	addTask(d, "t1-r7", "t1", 7, "pending", tree{"previous_revision": num(2), "reopen_reason": "Retried with a new plan."})
	addTask(d, "t1-r8", "t1", 8, "completed", tree{"previous_revision": num(7)})
	list(d, "checkpoints")[0].(tree)["tasks"] = []any{tree{"task_id": "t1", "revision": num(8)}, tree{"task_id": "t2", "revision": num(1)}}
	if _, err := asif.Check(encode(t, d), asif.Options{}); err != nil {
		require.FailNow(t, fmt.Sprintf("task history refused: %v", err))
	}
	// The same history on a branch that lacks t1's first revision.
	d = load(t, completedExample)
	addTask(d, "t1-r1", "t1", 1, "completed", nil)
	addTask(d, "t1-r2", "t1", 2, "pending", tree{"previous_revision": num(1), "reopen_reason": "Reopened by the reviewer."})
	if _, err := asif.Check(encode(t, d), asif.Options{}); err != nil {
		require.FailNow(t, fmt.Sprintf("reopen with a reason refused: %v", err))
	}
}

func addTextStream(d tree, text string) {
	appendTo(d, "resources", textResource("result-text", text))
	appendTo(d, "streams", tree{
		"id": "stream-text", "kind": "tool_result_text", "event_id": "result-late", "call_id": "call-1",
		"result_index": num(0), "status": "complete",
		"segments": []any{tree{"index": num(0), "resource_id": "result-text", "offset": num(0), "length": num(len(text)), "terminal": true}},
	})
}

func textResource(id, text string) tree {
	sum := sha256.Sum256([]byte(text))
	return tree{"id": id, "media_type": "text/plain", "purpose": "native", "availability": "embedded",
		"text": text, "bytes": num(len(text)), "sha256": hex.EncodeToString(sum[:])}
}

func TestAllRefusalsReported(t *testing.T) {
	doc := load(t, completedExample)
	segment(doc, "stream-complete", 1)["length"] = num(5)                          // span
	data(doc, "call-complete")["tool_id"] = "read-notes-2"                         // undefined tool + changed tool
	byID(doc, "resources", "arguments-prefix")["sha256"] = strings.Repeat("a", 64) // digest
	_, err := asif.Check(encode(t, doc), asif.Options{})
	for _, rule := range []asif.Rule{asif.RuleSegmentSpan, asif.RuleCallToolUndefined, asif.RuleAmendmentChangedTool, asif.RuleResourceSHA256} {
		assert.ErrorIsf(t, err, rule, "joined refusal lacks %s", rule)
	}
}

func TestTextStreamAssembles(t *testing.T) {
	doc := load(t, completedExample)
	addTextStream(doc, "Meeting notes: agree on the workshop outline.")
	report, err := asif.Check(encode(t, doc), asif.Options{})
	require.NoError(t, err)
	s := report.Stream("stream-text")
	require.Falsef(t, s.Status != asif.StreamComplete || string(s.Bytes) != "Meeting notes: agree on the workshop outline." || s.Executable, "text stream = %+v", s)
}

// A capture that starts after the call: the call is an external binding,
// the late result is local and correlates with it, and no call event is
// synthesized for the binding.
func TestLateResultCorrelatesWithBinding(t *testing.T) {
	doc := load(t, completedExample)
	removeEvents(doc, "call-partial", "call-complete")
	delete(doc, "streams")
	doc["required_features"] = []any{}
	res := byID(doc, "events", "result-late")
	external := tree{"event_id": "call-complete", "session_id": "session-call-progression", "capture_id": "capture-call-partial"}
	res["causes"] = []any{external}
	res["provenance"] = tree{"mode": "synthetic", "producer": "asif-test", "method": "window", "inputs": []any{external}}
	ctx := list(doc, "contexts")
	doc["contexts"] = ctx[:1]
	list(doc, "executions")[0].(tree)["context_ids"] = []any{"context-1"}
	addBinding(doc, callBinding("call-1", "read-notes"))
	events := len(list(doc, "events"))
	report, err := asif.Check(encode(t, doc), asif.Options{})
	require.NoError(t, err, "late result with an unchanged binding refused")
	calls := report.Branches[0].Calls
	require.EqualValuesf(t, 1, len(calls), "calls = %+v", calls)
	c := calls[0]
	require.Falsef(t, c.External == nil || c.External.CaptureID != "capture-earlier" || c.EventID != "", "binding reported as %+v; want external with no local event", c)
	require.Falsef(t, !c.Terminal || c.Outcome != asif.OutcomeSuccess || c.TerminalEventID != "result-late" || c.ArgumentsStatus != asif.ArgumentsPartial, "selected state = %+v", c)
	require.False(t, len(list(doc, "events")) != events, "events changed")
	// The report's JSON carries no local event id for the call, only the
	// binding's external source.
	b, _ := json.Marshal(c)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	if _, ok := m["event_id"]; ok {
		require.FailNow(t, fmt.Sprintf("state JSON names a local call event: %s", b))
	}
}

func TestPathResources(t *testing.T) {
	doc := load(t, completedExample)
	r := byID(doc, "resources", "arguments-suffix")
	delete(r, "text")
	r["path"] = "fragments/suffix.json"
	input := encode(t, doc)

	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "fragments"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fragments", "suffix.json"), []byte(`42"}`), 0o644))
	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	defer root.Close()
	report, err := asif.Check(input, asif.Options{Files: root.FS()})
	require.NoError(t, err, "path-backed resource refused")
	require.False(t, !report.Stream("stream-complete").Executable, "stream over a path-backed resource not assembled")
	for _, bad := range []string{"../suffix.json", "/etc/passwd", "fragments\\suffix.json", "fragments/./suffix.json", "fragments/missing"} {
		r["path"] = bad
		if _, err := asif.Check(encode(t, doc), asif.Options{Files: root.FS()}); !namesObject(err, asif.RuleResourcePath, "arguments-suffix") {
			assert.Fail(t, fmt.Sprintf("path %q: %v; want %s", bad, err, asif.RuleResourcePath))
		}
	}
}

func TestStreamTooLarge(t *testing.T) {
	doc := load(t, completedExample)
	big := strings.Repeat("x", 1<<20)
	appendTo(doc, "resources", textResource("big", big))
	var segs []any
	for i := 0; i <= asif.MaxStreamBytes>>20; i++ {
		segs = append(segs, tree{"index": num(i), "resource_id": "big", "offset": num(0), "length": num(len(big)), "terminal": false})
	}
	byID(doc, "streams", "stream-partial")["segments"] = segs
	report, err := asif.Check(encode(t, doc), asif.Options{})
	require.Falsef(t, !namesObject(err, asif.RuleStreamTooLarge, "stream-partial"), "err = %v; want %s", err, asif.RuleStreamTooLarge)
	if s := report.Stream("stream-partial"); s.Size != 0 {
		require.FailNow(t, fmt.Sprintf("oversized stream assembled %d bytes", s.Size))
	}
}

func TestReadRefusals(t *testing.T) {
	example := string(readFile(t, partialExample))
	deep := strings.Repeat("[", asif.MaxDepth+1) + strings.Repeat("]", asif.MaxDepth+1)
	// oversize is one byte over MaxDocumentBytes, and valid JSON but for
	// its size; Check and Read both refuse it (building it takes a second
	// under -race, so it is built once).
	oversize := strings.Repeat(" ", asif.MaxDocumentBytes) + "1"
	cases := []struct {
		name  string
		input string
		want  error
	}{
		{"duplicate keys", `{"a":1,"b":2,"a":3}`, asif.ErrDuplicateKey},
		{"duplicate keys in example", strings.Replace(example, `"asif_version": "0.5",`, `"asif_version": "0.5", "asif_version": "0.5",`, 1), asif.ErrDuplicateKey},
		{"duplicate keys by escape", `{"a":1,"\u0061":2}`, asif.ErrDuplicateKey},
		{"NaN", `{"a":NaN}`, asif.ErrNonFiniteNumber},
		{"Infinity", `[Infinity]`, asif.ErrNonFiniteNumber},
		{"-Infinity", `[-Infinity]`, asif.ErrNonFiniteNumber},
		{"oversize", oversize, asif.ErrTooLarge},
		{"too deep", deep, asif.ErrTooDeep},
		{"invalid UTF-8", "{\"a\":\"\xff\"}", asif.ErrInvalidUTF8},
		{"lone surrogate", `{"a":"\ud800"}`, asif.ErrInvalidUTF8},
		{"reversed surrogates", `{"a":"\udc00\ud800"}`, asif.ErrInvalidUTF8},
		{"trailing data", `{} {}`, asif.ErrSyntax},
		{"byte order mark", "\ufeff{}", asif.ErrSyntax},
		{"empty", ``, asif.ErrSyntax},
		{"leading zero", `[01]`, asif.ErrSyntax},
		{"control character", "[\"a\x01\"]", asif.ErrSyntax},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			report, err := asif.Check([]byte(tc.input), asif.Options{})
			var re *asif.ReadError
			require.Falsef(t, !errors.Is(err, tc.want) || !errors.As(err, &re) || report != nil, "err = %v (report %v); want *ReadError wrapping %v", err, report, tc.want)
		})
	}
	t.Run("value count", func(t *testing.T) {
		if testing.Short() {
			t.Skip("parses MaxValues values")
		}
		input := "[" + strings.Repeat("0,", asif.MaxValues) + "0]"
		if _, err := strictjson.Parse([]byte(input)); !errors.Is(err, asif.ErrTooManyValues) {
			require.FailNow(t, fmt.Sprintf("err = %v", err))
		}
	})
	t.Run("Read bound", func(t *testing.T) {
		_, err := asif.Read(strings.NewReader(oversize))
		require.ErrorIs(t, err, asif.ErrTooLarge, "err =")
		b, err := asif.Read(strings.NewReader(example))
		require.Falsef(t, err != nil || string(b) != example, "Read: %v", err)
	})
}

func TestVersions(t *testing.T) {
	example := string(readFile(t, partialExample))
	cases := []struct {
		name, input string
		found       string
		missing     bool
	}{
		{"older draft", strings.Replace(example, `"asif_version": "0.5"`, `"asif_version": "0.4"`, 1), "0.4", false},
		{"missing", strings.Replace(example, `"asif_version": "0.5",`, ``, 1), "", true},
		{"not a string", strings.Replace(example, `"asif_version": "0.5"`, `"asif_version": 0.5`, 1), "", true},
		{"not a version", strings.Replace(example, `"asif_version": "0.5"`, `"asif_version": "secret-token"`, 1), "", false},
		{"not an object", `[]`, "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := asif.Check([]byte(tc.input), asif.Options{})
			var ve *asif.VersionError
			require.ErrorAsf(t, err, &ve, "err = %v; want *VersionError", err)
			require.ErrorIsf(t, err, asif.ErrUnsupportedVersion, "err = %v; want *VersionError", err)
			require.Falsef(t, ve.Found != tc.found || ve.Missing != tc.missing, "VersionError = %+v", ve)
			require.Falsef(t, strings.Contains(err.Error(), "secret"), "message echoes content: %v", err)
			require.Falsef(t, !strings.Contains(err.Error(), "asif_version"), "message does not name the field: %v", err)
		})
	}
}

func TestSchemaErrors(t *testing.T) {
	doc := load(t, completedExample)
	segment(doc, "stream-complete", 1)["index"] = num(-1)
	delete(doc, "capture")
	byID(doc, "resources", "arguments-prefix")["media_type"] = "" // minLength
	data(doc, "result-late")["outcome"] = "secret-outcome"        // enum
	_, err := asif.Check(encode(t, doc), asif.Options{})
	var se *asif.SchemaError
	require.ErrorAsf(t, err, &se, "err = %v; want *SchemaError", err)
	require.ErrorIsf(t, err, asif.ErrSchema, "err = %v; want *SchemaError", err)
	want := map[asif.Violation]bool{
		{InstanceLocation: "/streams/1/segments/1/index", Keyword: "minimum"}: false,
		{InstanceLocation: "", Keyword: "required"}:                           false,
		{InstanceLocation: "/resources/0/media_type", Keyword: "minLength"}:   false,
		{InstanceLocation: "/events/3/data/outcome", Keyword: "enum"}:         false,
	}
	for _, v := range se.Violations {
		if _, ok := want[v]; ok {
			want[v] = true
		}
	}
	for v, found := range want {
		assert.Falsef(t, !found, "violation %+v not reported; got %+v", v, se.Violations)
	}
	require.Falsef(t, strings.Contains(err.Error(), "secret"), "schema error echoes a value: %v", err)
}

func TestStreamsFeatureRequiresField(t *testing.T) {
	doc := load(t, completedExample)
	delete(doc, "streams")
	_, err := asif.Check(encode(t, doc), asif.Options{})
	require.ErrorIsf(t, err, asif.ErrSchema, "err = %v; want schema refusal (feature declared without streams)", err)
}

// Rule error messages name the rule and the object id, never content.
func TestRuleErrorsDoNotEchoContent(t *testing.T) {
	doc := load(t, completedExample)
	setText(doc, "arguments-suffix", `SECRET"}`)
	data(doc, "call-complete")["arguments"] = tree{"document_id": "meeting-SECRET-2"}
	segment(doc, "stream-complete", 1)["length"] = num(8)
	_, err := asif.Check(encode(t, doc), asif.Options{})
	require.Falsef(t, err == nil || strings.Contains(err.Error(), "SECRET"), "err = %v", err)
	require.Falsef(t, !strings.Contains(err.Error(), string(asif.RuleStreamArgumentsMismatch)) || !strings.Contains(err.Error(), `"stream-complete"`), "message lacks rule or id: %v", err)
	long := &asif.RuleError{Rule: asif.RuleStreamStatus, Object: "stream", ObjectID: strings.Repeat("é", 100), Segment: -1}
	if n := len(long.Error()); n > 160 {
		require.FailNow(t, fmt.Sprintf("message of %d bytes for a long id", n))
	}
	var r asif.Rule
	require.Falsef(t, !errors.As(error(long), &r) || r != asif.RuleStreamStatus, "errors.As Rule = %v", r)
}

func TestRefusalsBounded(t *testing.T) {
	doc := load(t, completedExample)
	var segs []any
	for i := 0; i < asif.MaxRefusals+50; i++ {
		segs = append(segs, tree{"index": num(i), "resource_id": "missing", "offset": num(0), "length": num(0), "terminal": false})
	}
	byID(doc, "streams", "stream-partial")["segments"] = segs
	_, err := asif.Check(encode(t, doc), asif.Options{})
	var tm *asif.TooManyRefusalsError
	require.ErrorAsf(t, err, &tm, "err type %T", err)
	require.EqualValuesf(t, 50, tm.Dropped, "TooManyRefusalsError = %+v", tm)
	if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != asif.MaxRefusals+1 {
		require.FailNow(t, fmt.Sprintf("%d errors joined; want MaxRefusals+1", n))
	}
}

// Check shares only the compiled schema between calls; run it concurrently
// under -race.
func TestCheckConcurrent(t *testing.T) {
	inputs := [][]byte{readFile(t, partialExample), readFile(t, completedExample)}
	var wg sync.WaitGroup
	errs := make(chan error, 8) // one slot per goroutine: never blocks
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() { // stopped by returning; waited for by wg
			defer wg.Done()
			_, err := asif.Check(inputs[i%2], asif.Options{})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func BenchmarkCheckExample(b *testing.B) {
	data := readFile(b, completedExample)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := asif.Check(data, asif.Options{}); err != nil {
			require.FailNow(b, fmt.Sprint(err))
		}
	}
}

// BenchmarkCheckLargeResource checks the completed example carrying a
// 16 MiB embedded text resource (reading, schema, digest).
func BenchmarkCheckLargeResource(b *testing.B) {
	doc := load(b, completedExample)
	appendTo(doc, "resources", textResource("big", strings.Repeat("0123456789abcdé", 16<<20/16)))
	data := encode(b, doc)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := asif.Check(data, asif.Options{}); err != nil {
			require.FailNow(b, fmt.Sprint(err))
		}
	}
}

// TestUncheckedFamilies: the worked examples hold contexts, configurations,
// executions and (the later capture) lineage, which Check does not check, so they are not established
// valid; without those records the same history is.
func TestUncheckedFamilies(t *testing.T) {
	report, err := asif.Check(readFile(t, completedExample), asif.Options{})
	want := []asif.Family{asif.FamilyContexts, asif.FamilyConfigurations, asif.FamilyExecutions, asif.FamilyLineage}
	if err != nil || !slices.Equal(report.Unchecked, want) || report.Valid(err) {
		require.FailNow(t, fmt.Sprintf("err %v, unchecked %v, valid %v", err, report.Unchecked, report.Valid(err)))
	}
	d := load(t, completedExample)
	d["contexts"], d["configurations"], d["executions"] = []any{}, []any{}, []any{}
	d["session"].(tree)["lineage"] = []any{}
	for _, e := range list(d, "events") {
		delete(e.(tree), "execution_id")
	}
	cp := list(d, "checkpoints")[0].(tree)
	cp["context_id"], cp["configuration_id"] = nil, nil
	report, err = asif.Check(encode(t, d), asif.Options{})
	require.Falsef(t, err != nil || len(report.Unchecked) != 0 || report.Unchecked == nil || !report.Valid(err), "stripped example: err %v, unchecked %v", err, report.Unchecked)
	for name, mutate := range map[asif.Family]func(tree){
		asif.FamilyDecisions: func(d tree) {
			addEvent(d, tree{"id": "q", "sequence": num(50), "actor_id": "agent", "kind": "decision_request", "causes": []any{},
				"provenance": synthetic(), "data": tree{"request_id": "r1", "decision_kind": "question", "prompt": []any{}, "options": []any{}}})
		},
		asif.FamilyResourceChanges: func(d tree) {
			addEvent(d, tree{"id": "rc", "sequence": num(50), "actor_id": "agent", "kind": "resource_change", "causes": []any{},
				"provenance": synthetic(), "data": tree{"resource_id": "arguments-prefix", "operation": "observed"}})
		},
	} {
		m := load(t, completedExample)
		mutate(m)
		report, err := asif.Check(encode(t, m), asif.Options{})
		assert.Falsef(t, report == nil || !slices.Contains(report.Unchecked, name) || report.Valid(err), "%s: err %v, report %+v", name, err, report)
	}
	if got := asif.UncheckedFamilies(); len(got) == 0 || got[0] != asif.FamilyContexts {
		require.FailNow(t, fmt.Sprintf("UncheckedFamilies() = %v", got))
	}
}
