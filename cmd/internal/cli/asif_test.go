package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skulkrt/skulk/asif"
	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/sqlitestore"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/recorder"
	"github.com/skulkrt/skulk/skulktest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const examples = "../../../asif/testdata/"

func decodeCheck(t *testing.T, stdout string) checkReport {
	t.Helper()
	var cr checkReport
	if err := json.Unmarshal([]byte(stdout), &cr); err != nil {
		require.FailNow(t, fmt.Sprintf("--json output is not one JSON object: %v\n%s", err, stdout))
	}
	return cr
}

func TestASIFCheckExamples(t *testing.T) {
	code, stdout, stderr := runCLI(t, "asif", "check", examples+"tool-call-completed.session.json", "--json")
	require.Falsef(t, code != ExitOK || stderr != "", "status %d, stderr %q", code, stderr)
	cr := decodeCheck(t, stdout)
	// No refusal, but the example holds contexts, configurations,
	// executions and lineage, which the checker does not check: it is not
	// reported valid.
	require.Falsef(t, cr.Valid || len(cr.Streams) != 2 || len(cr.Refusals) != 0 ||
		!slices.Equal(cr.Unchecked, []asif.Family{asif.FamilyContexts, asif.FamilyConfigurations, asif.FamilyExecutions, asif.FamilyLineage}) ||
		!slices.Equal(cr.NotChecked, asif.UncheckedFamilies()), "report %+v", cr)
	for _, s := range cr.Streams {
		switch s.StreamID {
		case "stream-partial":
			assert.Falsef(t, s.Status != asif.StreamPartial || s.Size != 24 || s.Executable, "stream-partial %+v", s)
		case "stream-complete":
			assert.Falsef(t, s.Status != asif.StreamComplete || s.Size != 28 || !s.Executable, "stream-complete %+v", s)
		}
	}
	c := cr.Branches[0].Calls[0]
	var args bytes.Buffer
	require.NoError(t, json.Compact(&args, c.Arguments))
	require.Falsef(t, c.CallID != "call-1" || c.EventID != "call-complete" || args.String() != `{"document_id":"meeting-42"}` ||
		c.ArgumentsStatus != asif.ArgumentsComplete || !c.Terminal || c.Outcome != asif.OutcomeSuccess, "selected state %+v", c)
	// The raw JSON carries the keys the help promises.
	for _, k := range []string{`"assembled_bytes": 28`, `"declared_status"`, `"executable": true`, `"arguments_status": "complete"`, `"outcome": "success"`} {
		assert.Falsef(t, !strings.Contains(stdout, k), "--json output lacks %s", k)
	}

	code, stdout, stderr = runCLI(t, "asif", "check", examples+"tool-call-partial.session.json")
	require.Falsef(t, code != ExitOK || stderr != "", "partial example: status %d, stderr %q", code, stderr)
	require.Falsef(t, !strings.Contains(stdout, ": NOT ESTABLISHED (no refusal, but it holds records of rule families not checked: contexts, configurations, executions) (asif 0.5, 1 streams)") ||
		strings.Contains(stdout, ": valid") || !strings.Contains(stdout, "  rule families this checker does not check: contexts, configurations, environments,") || !strings.Contains(stdout, "stream stream-partial  tool_arguments of call-partial (call call-1)  partial, 24 B assembled") ||
		!strings.Contains(stdout, "arguments partial {}") || !strings.Contains(stdout, "open"), "human output:\n%s", stdout)
}

// TestASIFCheckValid: the completed example without the records of rule
// families not checked is reported valid, in text and --json.
func TestASIFCheckValid(t *testing.T) {
	d := loadExample(t)
	d["contexts"], d["configurations"], d["executions"] = []any{}, []any{}, []any{}
	d["session"].(map[string]any)["lineage"] = []any{}
	for _, e := range d["events"].([]any) {
		delete(e.(map[string]any), "execution_id")
	}
	cp := d["checkpoints"].([]any)[0].(map[string]any)
	cp["context_id"], cp["configuration_id"] = nil, nil
	path := writeDoc(t, d)
	code, stdout, stderr := runCLI(t, "asif", "check", path)
	require.Falsef(t, code != ExitOK || stderr != "" || !strings.Contains(stdout, ": valid (asif 0.5, 2 streams)") || strings.Contains(stdout, "not checked, present"), "status %d, stderr %q, stdout:\n%s", code, stderr, stdout)
	code, stdout, _ = runCLI(t, "asif", "check", "--json", path)
	if cr := decodeCheck(t, stdout); code != ExitOK || !cr.Valid || len(cr.Unchecked) != 0 || cr.Unchecked == nil {
		require.FailNow(t, fmt.Sprintf("--json: status %d, %+v", code, cr))
	}
}

func TestASIFCheckRefusals(t *testing.T) {
	data, err := os.ReadFile(examples + "tool-call-completed.session.json")
	require.NoError(t, err)
	dir := t.TempDir()
	tests := []struct {
		name, old, new, want string
	}{
		{"span", `"length": 4,`, `"length": 5,`, "segment_span_out_of_bounds"},
		{"tool", `"tool_id": "read-notes",
        "arguments": {
          "document_id"`, `"tool_id": "other",
        "arguments": {
          "document_id"`, "amendment_changed_tool"},
		{"schema", `"asif_version": "0.5"`, `"asif_version": "0.5", "events": 1`, "duplicate"},
		{"version", `"asif_version": "0.5"`, `"asif_version": "0.4"`, "asif_version"},
	}
	for _, tt := range tests {
		require.Truef(t, strings.Contains(string(data), tt.old), "%s: the example lacks %q", tt.name, tt.old)
		path := filepath.Join(dir, tt.name+".json")
		require.NoError(t, os.WriteFile(path, []byte(strings.Replace(string(data), tt.old, tt.new, 1)), 0o644))
		code, stdout, stderr := runCLI(t, "asif", "check", path)
		assert.Falsef(t, code != ExitFailure, "%s: status %d, want %d", tt.name, code, ExitFailure)
		assert.Falsef(t, strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "refused"), "%s: stderr %q", tt.name, stderr)
		assert.Falsef(t, !strings.Contains(stdout, "REFUSED") || !strings.Contains(stdout, tt.want), "%s: stdout %q", tt.name, stdout)
		code, stdout, _ = runCLI(t, "asif", "check", "--json", path)
		cr := decodeCheck(t, stdout)
		assert.Falsef(t, code != ExitFailure || cr.Valid || (len(cr.Refusals) == 0 && cr.Error == ""), "%s --json: status %d, %+v", tt.name, code, cr)
		if tt.name == "version" && (len(cr.Refusals) != 1 || cr.Refusals[0].Rule != "version_unsupported" ||
			cr.Refusals[0].Object != "asif_version" || cr.Refusals[0].ObjectID != "0.4" || cr.Error == "") {
			assert.Fail(t, fmt.Sprintf("version --json: refusals %+v, error %q", cr.Refusals, cr.Error))
		}
	}
}

func loadExample(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(examples + "tool-call-completed.session.json")
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var d map[string]any
	require.NoError(t, dec.Decode(&d))
	return d
}

func writeDoc(t *testing.T, d map[string]any) string {
	t.Helper()
	b, err := json.Marshal(d)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "doc.json")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return path
}

// addTaskUpdate appends a task_update event to the example's branch.
func addTaskUpdate(d map[string]any, id, taskID string, revision int, status string, extra map[string]any) {
	data := map[string]any{"task_id": taskID, "revision": revision, "status": status, "parts": []any{}}
	for k, v := range extra {
		data[k] = v
	}
	events := d["events"].([]any)
	d["events"] = append(events, map[string]any{
		"id": id, "sequence": 100 + len(events), "actor_id": "agent", "kind": "task_update", "causes": []any{},
		"provenance": map[string]any{"mode": "synthetic", "producer": "cli-test", "method": "mutation", "inputs": []any{}},
		"data":       data,
	})
	br := d["branches"].([]any)[0].(map[string]any)
	br["event_ids"] = append(br["event_ids"].([]any), id)
	br["head_event_id"] = id
	d["checkpoints"].([]any)[0].(map[string]any)["at_event_id"] = id
}

// TestASIFCheckTaskAndReferenceRules: asif check reports each task and
// reference rule, in text and --json, for a document that breaks it.
func TestASIFCheckTaskAndReferenceRules(t *testing.T) {
	event := func(d map[string]any, id string) map[string]any {
		for _, e := range d["events"].([]any) {
			if e.(map[string]any)["id"] == id {
				return e.(map[string]any)
			}
		}
		require.FailNow(t, fmt.Sprintf("no event %s", id))
		return nil
	}
	checkpoint := func(d map[string]any) map[string]any { return d["checkpoints"].([]any)[0].(map[string]any) }
	tests := []struct {
		rule   asif.Rule
		id     string
		mutate func(d map[string]any)
	}{
		{asif.RuleTaskDuplicateRevision, "b", func(d map[string]any) {
			addTaskUpdate(d, "a", "t1", 1, "pending", nil)
			addTaskUpdate(d, "b", "t1", 1, "pending", map[string]any{"previous_revision": 1})
		}},
		{asif.RuleTaskRevisionOrder, "a", func(d map[string]any) {
			addTaskUpdate(d, "a", "t1", 2, "pending", map[string]any{"previous_revision": 3})
		}},
		{asif.RuleTaskPredecessorMismatch, "b", func(d map[string]any) {
			addTaskUpdate(d, "a", "t1", 1, "pending", nil)
			addTaskUpdate(d, "b", "t1", 5, "pending", map[string]any{"previous_revision": 4})
		}},
		{asif.RuleTaskPredecessorGap, "a", func(d map[string]any) {
			addTaskUpdate(d, "a", "t1", 2, "pending", map[string]any{"previous_revision": 1})
		}},
		{asif.RuleTaskReopenWithoutReason, "b", func(d map[string]any) {
			addTaskUpdate(d, "a", "t1", 1, "failed", nil)
			addTaskUpdate(d, "b", "t1", 2, "in_progress", map[string]any{"previous_revision": 1})
		}},
		{asif.RuleTaskDependencyMissing, "a", func(d map[string]any) {
			addTaskUpdate(d, "a", "t1", 1, "pending", map[string]any{"dependencies": []any{"t9"}})
		}},
		{asif.RuleTaskDependencySelf, "a", func(d map[string]any) {
			addTaskUpdate(d, "a", "t1", 1, "pending", map[string]any{"dependencies": []any{"t1"}})
		}},
		{asif.RuleTaskDependencyCycle, "b", func(d map[string]any) {
			addTaskUpdate(d, "a", "t1", 1, "pending", map[string]any{"dependencies": []any{"t2"}})
			addTaskUpdate(d, "b", "t2", 1, "pending", map[string]any{"dependencies": []any{"t1"}})
		}},
		{asif.RuleEventActorUndeclared, "e1", func(d map[string]any) { event(d, "e1")["actor_id"] = "nobody" }},
		{asif.RuleEventExecutionUndeclared, "result-late", func(d map[string]any) { event(d, "result-late")["execution_id"] = "run-9" }},
		{asif.RuleEventCauseMissing, "result-late", func(d map[string]any) {
			event(d, "result-late")["causes"] = []any{map[string]any{"event_id": "nope"}}
		}},
		{asif.RuleEventCauseOrder, "e1", func(d map[string]any) {
			event(d, "e1")["causes"] = []any{map[string]any{"event_id": "result-late"}}
		}},
		{asif.RuleBranchCauseOrder, "alt", func(d map[string]any) {
			d["branches"] = append(d["branches"].([]any), map[string]any{"id": "alt", "event_ids": []any{"call-partial", "e1"}, "head_event_id": "e1"})
		}},
		{asif.RuleBranchHead, "main", func(d map[string]any) { d["branches"].([]any)[0].(map[string]any)["head_event_id"] = "e1" }},
		{asif.RuleCheckpointBranchMissing, "checkpoint-completed", func(d map[string]any) { checkpoint(d)["branch_id"] = "nope" }},
		{asif.RuleCheckpointEventNotInBranch, "checkpoint-completed", func(d map[string]any) { checkpoint(d)["at_event_id"] = "nope" }},
		{asif.RuleCheckpointCallUnknown, "checkpoint-completed", func(d map[string]any) {
			checkpoint(d)["open_calls"] = []any{map[string]any{"call_id": "call-9", "state": "pending"}}
		}},
		{asif.RuleCheckpointTaskUnknown, "checkpoint-completed", func(d map[string]any) {
			checkpoint(d)["tasks"] = []any{map[string]any{"task_id": "t1", "revision": 1}}
		}},
	}
	for _, tt := range tests {
		d := loadExample(t)
		tt.mutate(d)
		path := writeDoc(t, d)
		code, stdout, _ := runCLI(t, "asif", "check", path)
		assert.Falsef(t, code != ExitFailure || !strings.Contains(stdout, "REFUSED") || !strings.Contains(stdout, "refused: rule "+tt.rule.String()), "%s: status %d, stdout:\n%s", tt.rule, code, stdout)
		code, stdout, _ = runCLI(t, "asif", "check", "--json", path)
		cr := decodeCheck(t, stdout)
		found := false
		for _, r := range cr.Refusals {
			found = found || (r.Rule == tt.rule.String() && r.ObjectID == tt.id)
		}
		assert.Falsef(t, code != ExitFailure || cr.Valid || !found, "%s --json: status %d, refusals %+v", tt.rule, code, cr.Refusals)
	}
}

// recordJournal records one call of upper into a SQLite journal with full
// content, as a host would, and returns the journal's path and the text
// the caller saw.
func recordJournal(t *testing.T) (string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "calls.db")
	st, err := sqlitestore.Open(path)
	require.NoError(t, err)
	defer st.Close()
	rec, err := recorder.New(calllog.Options{FullContent: true, Journal: &calllog.Journal{Store: st, Required: true}}, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := rec.Begin(ctx, recorder.CallInfo{ID: "t1", Tool: "upper", ToolVersion: "1"})
	require.NoError(t, err)
	r.Request(recorder.RequestInfo{Child: "child-0"})
	var text strings.Builder // what the caller saw
	for i, s := range []string{"HELLO ", "WORLD"} {
		f, err := frame.NewChunk("t1", frame.ProviderToCaller, uint64(i+1), frame.MustPayload(map[string]any{"text": s}), nil)
		require.NoError(t, err)
		r.Output(f)
		text.WriteString(s)
	}
	require.NoError(t, r.End(ctx, recorder.Done(frame.MustPayload(map[string]any{"chunks": 2}))))
	require.NoError(t, rec.Close(ctx))
	return path, text.String()
}

func TestASIFExportThenCheck(t *testing.T) {
	db, text := recordJournal(t)
	out := filepath.Join(t.TempDir(), "t1.asif.json")
	code, stdout, stderr := runCLI(t, "asif", "export", db, "t1", "-o", out)
	require.Falsef(t, code != ExitOK || stdout != "" || !strings.HasPrefix(stderr, "wrote "+out), "export: status %d, stdout %q, stderr %q", code, stdout, stderr)
	code, stdout, stderr = runCLI(t, "asif", "check", out, "--json")
	require.Falsef(t, code != ExitOK || stderr != "", "check: status %d, stderr %q", code, stderr)
	cr := decodeCheck(t, stdout)
	require.Falsef(t, len(cr.Streams) != 1 || cr.Streams[0].Status != asif.StreamComplete || cr.Streams[0].Size != len(text), "streams %+v (caller saw %q)", cr.Streams, text)
	// The assembled text itself, checked from the document.
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	rep, err := asif.Check(data, asif.Options{})
	if err != nil || string(rep.Streams[0].Bytes) != text {
		require.FailNow(t, fmt.Sprintf("assembled %q, caller saw %q (%v)", rep.Streams[0].Bytes, text, err))
	}

	// A window after the request: the call is an external binding.
	code, stdout, stderr = runCLI(t, "asif", "export", db, "t1", "--after", "2")
	require.Falsef(t, code != ExitOK || !strings.HasPrefix(stderr, "wrote standard output (") || !strings.Contains(stderr, "1 external bindings;"), "export --after: status %d, stderr %q", code, stderr)
	require.Falsef(t, !strings.Contains(stdout, `"external_bindings"`) || strings.Contains(stdout, `"kind": "tool_call"`), "window document:\n%s", stdout)
	code, stdout, _ = runCLI(t, "asif", "check", "-", "--json")
	_ = stdout
	require.Falsef(t, code != ExitFailure, "empty standard input: status %d", code)
}

func TestASIFExportErrors(t *testing.T) {
	db, _ := recordJournal(t)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"asif"}, ExitUsage, "subcommand"},
		{[]string{"asif", "frob"}, ExitUsage, "subcommand"},
		{[]string{"asif", "export", db}, ExitUsage, "JOURNAL and TREE"},
		{[]string{"asif", "export", db, "t1", "--after", "x"}, ExitUsage, "seq"},
		{[]string{"asif", "export", db, "t1", "--after", "3", "--until", "2"}, ExitUsage, "--until"},
		{[]string{"asif", "check"}, ExitUsage, "FILE"},
		{[]string{"asif", "export", db, "nope"}, ExitFailure, "no events"},
		{[]string{"asif", "export", filepath.Join(t.TempDir(), "missing.db"), "t1"}, ExitFailure, "journal"},
		{[]string{"asif", "export", db, "t1", "--after", "99"}, ExitFailure, "no event in the window"},
		{[]string{"asif", "check", filepath.Join(t.TempDir(), "missing.json")}, ExitFailure, "cannot read"},
	}
	for _, tt := range cases {
		code, stdout, stderr := runCLI(t, tt.args...)
		assert.Falsef(t, code != tt.code || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, tt.want), "%q: status %d, stdout %q, stderr %q", tt.args, code, stdout, stderr)
	}
	code, stdout, _ := runCLI(t, "help", "asif")
	for _, w := range []string{"--after", "--until", "--tools", "-o FILE", "--json", "Example"} {
		assert.Falsef(t, code != ExitOK || !strings.Contains(stdout, w), "help asif does not mention %s", w)
	}
}

// TestASIFExportRealCalls makes real calls through cmd/skulk-child with
// call --journal, exports their trees and checks the documents: the text
// assembles to what the call printed, the crash's outcome is synthetic,
// and a window mid-call binds the call instead of inventing it.
func TestASIFExportRealCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/skulk-child")
	}
	dir := t.TempDir()
	child, err := skulktest.BuildIn(dir, "github.com/skulkrt/skulk/cmd/skulk-child")
	require.NoError(t, err)
	db := filepath.Join(dir, "calls.db")
	toolsFile := filepath.Join(dir, "tools.json")
	code, stdout, stderr := runCLI(t, "tools", "--json", "--", child, "--test-tools")
	require.Falsef(t, code != ExitOK, "tools: %d %s", code, stderr)
	require.NoError(t, os.WriteFile(toolsFile, []byte(stdout), 0o644))
	call := func(stdin string, args ...string) (tree, out string, status int) {
		t.Helper()
		var o, e bytes.Buffer
		status = Run(context.Background(), append([]string{"call"}, args...), Env{Stdout: &o, Stderr: &e, Stdin: strings.NewReader(stdin)})
		_, rest, ok := strings.Cut(e.String(), "journal: tree ")
		tree, _, _ = strings.Cut(rest, " ")
		if !ok || tree == "" {
			require.FailNow(t, fmt.Sprintf("call %q: no tree on stderr %q", args, e.String()))
		}
		return tree, o.String(), status
	}
	check := func(path string) checkReport {
		t.Helper()
		code, stdout, stderr := runCLI(t, "asif", "check", path, "--json")
		require.Falsef(t, code != ExitOK, "check %s: status %d, %s\n%s", path, code, stderr, stdout)
		return decodeCheck(t, stdout)
	}

	tree, out, status := call("hello\nwörld\n", "upper", "--journal", db, "--input", "-", "--", child)
	require.Falsef(t, status != ExitOK || out != "HELLO\nWÖRLD\n", "upper: %d %q", status, out)
	full := filepath.Join(dir, "upper.json")
	if code, _, stderr := runCLI(t, "asif", "export", db, tree, "--tools", toolsFile, "-o", full); code != ExitOK {
		require.FailNow(t, fmt.Sprintf("export: %d %s", code, stderr))
	}
	cr := check(full)
	require.Falsef(t, len(cr.Streams) != 1 || cr.Streams[0].Status != asif.StreamComplete || cr.Streams[0].Size != len("HELLO\nWÖRLD\n"), "upper streams %+v", cr.Streams)
	data, err := os.ReadFile(full)
	require.NoError(t, err)
	rep, err := asif.Check(data, asif.Options{})
	if err != nil || string(rep.Streams[0].Bytes) != "HELLO\nWÖRLD\n" {
		require.FailNow(t, fmt.Sprintf("assembled %q (%v)", rep.Streams[0].Bytes, err))
	}
	require.False(t, strings.Contains(string(data), "tool_definition_incomplete"), "tools given, yet a tool definition is incomplete")

	// A window after the first output: binding, no call event.
	late := filepath.Join(dir, "upper-late.json")
	if code, _, stderr := runCLI(t, "asif", "export", db, tree, "--after", "4", "-o", late); code != ExitOK {
		require.FailNow(t, fmt.Sprintf("export --after: %d %s", code, stderr))
	}
	cr = check(late)
	c := cr.Branches[0].Calls[0]
	require.Falsef(t, c.External == nil || c.EventID != "" || !c.Terminal || c.Outcome != asif.OutcomeSuccess, "late call %+v", c)
	if data, _ := os.ReadFile(late); strings.Contains(string(data), `"kind": "tool_call"`) {
		require.FailNow(t, "the window invented a tool_call")
	}

	tree, _, status = call("", "crash", "--args", `{"after": 2}`, "--journal", db, "--", child, "--test-tools")
	require.Falsef(t, status != ExitUnreachable, "crash: status %d", status)
	crash := filepath.Join(dir, "crash.json")
	if code, _, stderr := runCLI(t, "asif", "export", db, tree, "-o", crash); code != ExitOK {
		require.FailNow(t, fmt.Sprintf("export crash: %d %s", code, stderr))
	}
	if c := check(crash).Branches[0].Calls[0]; !c.Terminal || c.Outcome != asif.OutcomeError {
		require.FailNow(t, fmt.Sprintf("crash call %+v", c))
	}
	if data, _ := os.ReadFile(crash); !strings.Contains(string(data), `"mode": "synthetic"`) || !strings.Contains(string(data), "synthetic_outcome") {
		require.FailNow(t, "the crash's outcome is not marked synthetic")
	}
}

// TestASIFExportStreamedArguments records a call whose arguments stream
// as fragments (the worked examples' arguments) into a SQLite journal and
// exports it in two captures cut after the first fragment: the first
// holds a partial, never executable call; the second its amendment with an
// executable stream — as tool-call-partial and tool-call-completed show.
func TestASIFExportStreamedArguments(t *testing.T) {
	path := filepath.Join(t.TempDir(), "calls.db")
	st, err := sqlitestore.Open(path)
	require.NoError(t, err)
	defer st.Close()
	rec, err := recorder.New(calllog.Options{FullContent: true, Journal: &calllog.Journal{Store: st, Required: true}}, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := rec.Begin(ctx, recorder.CallInfo{ID: "s1", Tool: "read-notes", ArgumentsStreamed: true})
	require.NoError(t, err)
	r.Arguments(`{"document_id":"meeting-`) // seq 2
	r.Arguments(`42"}`)
	r.Request(recorder.RequestInfo{Child: "child-0", Args: frame.MustPayload(map[string]any{"document_id": "meeting-42"})})
	require.NoError(t, r.End(ctx, recorder.Done(nil)))
	require.NoError(t, rec.Close(ctx))
	dir := t.TempDir()
	for _, w := range []struct {
		file, flag string
		status     asif.ArgumentsStatus
		executable bool
	}{
		{"early.json", "--until", asif.ArgumentsPartial, false},
		{"late.json", "--after", asif.ArgumentsComplete, true},
	} {
		out := filepath.Join(dir, w.file)
		if code, _, stderr := runCLI(t, "asif", "export", path, "s1", w.flag, "2", "-o", out); code != ExitOK {
			require.FailNow(t, fmt.Sprintf("%s: %d %s", w.file, code, stderr))
		}
		code, stdout, stderr := runCLI(t, "asif", "check", out, "--json")
		require.Falsef(t, code != ExitOK, "%s: %d %s", w.file, code, stderr)
		cr := decodeCheck(t, stdout)
		c := cr.Branches[0].Calls[0]
		last := cr.Streams[len(cr.Streams)-1]
		require.Falsef(t, c.ArgumentsStatus != w.status || last.Executable != w.executable || c.External != nil, "%s: call %+v, stream %+v", w.file, c, last)
		require.Falsef(t, w.executable && (last.Size != 28 || !c.Terminal), "%s: stream %+v (the example's is 28 bytes), call %+v", w.file, last, c)
	}
}

// TestReplayErrors: replay reads its tree as asif export does, so an
// unknown tree and a missing journal end it the same way.
func TestReplayErrors(t *testing.T) {
	db, _ := recordJournal(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"replay", db, "nope"}, "no events of tree"},
		{[]string{"replay", filepath.Join(t.TempDir(), "missing.db"), "t1"}, "cannot open the journal"},
	} {
		code, stdout, stderr := runCLI(t, tt.args...)
		assert.Falsef(t, code != ExitFailure || stdout != "" || !strings.Contains(stderr, tt.want), "%q: status %d, stdout %q, stderr %q", tt.args, code, stdout, stderr)
	}
	if code, stdout, stderr := runCLI(t, "replay", db, "t1"); code != ExitOK || !strings.Contains(stdout, "call t1 upper") {
		assert.Fail(t, fmt.Sprintf("replay t1: status %d, stdout %q, stderr %q", code, stdout, stderr))
	}
}

// TestASIFCheckEscapesHuman: the ids and arguments of an ASIF document
// may be whatever a child sent; asif check shows them escaped, as inert
// text, and --json keeps them exact.
func TestASIFCheckEscapesHuman(t *testing.T) {
	data, err := os.ReadFile(examples + "tool-call-completed.session.json")
	require.NoError(t, err)
	// JSON escapes in the document's text: a window title, a clear
	// screen, a red colour with a carriage return, a right-to-left
	// override.
	doc := string(data)
	for _, r := range []struct{ old, new string }{
		{`"call-1"`, `"call-1\u001b]0;pwned\u0007"`},
		{`"read-notes"`, `"read\u001b[2Jnotes\u202e"`},
		{`"stream-partial"`, `"stream\u001b[1;31m-partial\r"`},
		{`"stream-complete"`, `"stream-complete\u001b[8m"`},
		// Raw in the document's UTF-8, as JSON allows: a C1 CSI and a
		// right-to-left override. The arguments no longer match the
		// stream-complete stream's bytes: the document is refused, and
		// the refusal names that stream.
		{`"meeting-42"`, "\"meeting\u009b2J-42\u202e\""},
	} {
		require.Truef(t, strings.Contains(doc, r.old), "the example lacks %s", r.old)
		doc = strings.ReplaceAll(doc, r.old, r.new)
	}
	path := filepath.Join(t.TempDir(), "evil.json")
	require.NoError(t, os.WriteFile(path, []byte(doc), 0o644))

	code, stdout, stderr := runCLI(t, "asif", "check", path)
	require.Falsef(t, code != ExitFailure, "status %d, want %d; stderr %q, stdout:\n%s", code, ExitFailure, stderr, stdout)
	for i, r := range stdout + stderr {
		require.Falsef(t, r < 0x20 && r != '\n' || r == 0x7f || r >= 0x80 && r <= 0x9f || r == 0x202e, "control character %U at %d in the human output: %q, stderr %q", r, i, stdout, stderr)
	}
	for _, want := range []string{
		`refused: rule stream_arguments_mismatch (stream "stream-complete\x1b[8m")`,
		`stream stream-complete\x1b[8m  tool_arguments of call-complete`,
		`stream stream\x1b[1;31m-partial\r  tool_arguments of call-partial (call call-1\x1b]0;pwned\x07)`,
		`call call-1\x1b]0;pwned\x07  read\x1b[2Jnotes\u202e, event call-complete; arguments complete {"document_id":"meeting\u009b2J-42\u202e"}`,
	} {
		assert.Falsef(t, !strings.Contains(stdout, want), "the human output lacks %s:\n%s", want, stdout)
	}

	code, stdout, _ = runCLI(t, "asif", "check", "--json", path)
	cr := decodeCheck(t, stdout)
	require.Falsef(t, code != ExitFailure || len(cr.Branches) == 0 || len(cr.Branches[0].Calls) == 0 || len(cr.Refusals) != 1 || cr.Refusals[0].ObjectID != "stream-complete\x1b[8m", "--json: status %d, %+v", code, cr)
	c := cr.Branches[0].Calls[0]
	var args bytes.Buffer
	json.Compact(&args, c.Arguments)
	if c.CallID != "call-1\x1b]0;pwned\x07" || c.ToolID != "read\x1b[2Jnotes\u202e" || args.String() != "{\"document_id\":\"meeting\u009b2J-42\u202e\"}" {
		require.FailNow(t, fmt.Sprintf("--json is not exact: call %q, tool %q, arguments %s", c.CallID, c.ToolID, args.String()))
	}
}
