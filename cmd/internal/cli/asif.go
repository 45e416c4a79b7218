package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/skulkrt/skulk/asif"
	"github.com/skulkrt/skulk/asif/export"
	"github.com/skulkrt/skulk/cmd/internal/termsafe"
)

const asifUsage = "asif export JOURNAL TREE [--after SEQ] [--until SEQ] [--tools FILE] [-o FILE] | asif check FILE [--json]"

var asifHelp = `
Asif hands over captured call evidence as ASIF 0.5 session documents (the
public Agent Session Interchange Format, with its streams and external
bindings features), and checks such documents.

	skulk-host asif export JOURNAL TREE [--after SEQ] [--until SEQ] [--tools FILE] [-o FILE]

Export reads the call tree TREE (its outermost call's id) from the call
journal JOURNAL (a SQLite file or a nats:// store URL, recorded with full content, as
skulk-host call --journal FILE records it and prints the tree's id) and
writes one session document: each call a tool_call, each provider result a
tool_result, text chunks as tool_result_text streams, streamed arguments as
tool_arguments streams, and a loss for everything ASIF cannot carry. The
document is checked (schema and rules) before it is written.

	--after SEQ
		start the capture after journal event SEQ: calls begun before it
		are external bindings naming the earlier capture, never invented
		call events (default 0: from the start).
	--until SEQ
		end the capture at journal event SEQ, as if it had been made then
		(default 0: every event kept).
	--tools FILE
		the tools' descriptors, as printed by skulk-host tools --json;
		without it tools are defined with an unknown input schema.
	-o FILE
		write the document to FILE instead of standard output.

	skulk-host asif check FILE [--json]

Check reads FILE (- for standard input) and checks it: strict JSON, version
0.5, the embedded JSON Schema, and these rules the schema cannot express:
required features; embedded resources' bytes, digests and paths; event ids
and sequence; actors, executions and causes (resolving, and pointing to
earlier events); branch heads and causal order; checkpoints' branch, event,
open calls and task revisions; tool-call identity, amendments, retries and
result order; task revisions (one event per revision, previous_revision
naming the selected predecessor, reopen_reason when a completed, failed,
cancelled or superseded task reopens, a predecessor gap only under partial
tasks coverage) and dependencies (no dangling, self or cyclic ones);
streams; external bindings. It prints each stream's status and assembled
size and each call's selected state; every refusal is printed naming its
rule and object. Path-backed resources are resolved in FILE's directory.

These rule families are not checked: contexts, configurations,
environments, executions, decisions, corrections (supersedes on events
other than tool calls), extensions, lineage, resource changes, checkpoint
state (open decisions, requirements) and usage. A document that holds
records of any of them is never reported valid: it is NOT ESTABLISHED even
when nothing is refused, and the report names the families present.

	--json
		print the same as one JSON object: valid (true only with no
		refusal and no unchecked family present), streams (id, kind,
		event_id, call_id, status, declared_status, assembled_bytes,
		executable), branches (each call's arguments, arguments_status and,
		once a terminal result closed it, outcome), refusals (rule, object,
		id; an unsupported version is rule version_unsupported of object
		asif_version), unchecked (the families not checked that are
		present), not_checked (every family not checked) and error.

Exit status: 0 when the document was written or no check refused it
(valid or NOT ESTABLISHED), 1 when the journal cannot be read or the
document was refused, 2 for a usage error.

Examples:

	skulk-host call upper --journal calls.db --input - -- ./skulk-child
	skulk-host asif export calls.db c7 -o c7.asif.json
	skulk-host asif export calls.db c7 --after 40 -o c7-late.asif.json
	skulk-host asif check c7.asif.json --json
`

func runASIF(ctx context.Context, args []string, env Env) error {
	if len(args) == 0 {
		return usageErr("missing the subcommand: export or check")
	}
	switch args[0] {
	case "export":
		return runASIFExport(ctx, args[1:], env)
	case "check":
		return runASIFCheck(args[1:], env)
	case "-h", "-help", "--help", "help":
		return flag.ErrHelp
	}
	return usageErr("unknown subcommand: want export or check")
}

// seqFlag is a journal seq given on the command line.
type seqFlag uint64

func (s *seqFlag) String() string { return strconv.FormatUint(uint64(*s), 10) }

func (s *seqFlag) Set(v string) error {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return errors.New("want a journal seq, a whole number >= 0")
	}
	*s = seqFlag(n)
	return nil
}

func runASIFExport(ctx context.Context, args []string, env Env) error {
	fs := flag.NewFlagSet("asif export", flag.ContinueOnError)
	var after, until seqFlag
	fs.Var(&after, "after", "")
	fs.Var(&until, "until", "")
	toolsFile := fs.String("tools", "", "")
	out := fs.String("o", "", "")
	pos, child, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(child) > 0 {
		return usageErr("asif export starts no child: nothing goes after --")
	}
	if len(pos) != 2 {
		return usageErr("asif export wants JOURNAL and TREE")
	}
	if until != 0 && until <= after {
		return usageErr("--until must be greater than --after")
	}
	opts := export.Options{After: uint64(after), Until: uint64(until)}
	if *toolsFile != "" {
		data, err := os.ReadFile(*toolsFile)
		if err != nil {
			return statusErr(ExitFailure, "cannot read --tools: %v", err)
		}
		if err := json.Unmarshal(data, &opts.Tools); err != nil {
			return statusErr(ExitFailure, "--tools %s is not the JSON array skulk-host tools --json prints: %v", *toolsFile, err)
		}
	}
	events, corrupt, err := readTree(ctx, pos[0], pos[1], uint64(until))
	if err != nil {
		return err
	}
	if corrupt > 0 {
		fmt.Fprintf(env.Stderr, "skulk-host asif export: %d event(s) of tree %s are kept but cannot be read: exported as lost\n", corrupt, termsafe.Escape(pos[1]))
	}
	session, err := export.Export(events, opts)
	var (
		readErr   *asif.ReadError
		schemaErr *asif.SchemaError
		ruleErr   *asif.RuleError
	)
	switch {
	case errors.Is(err, asif.ErrTooLarge) || errors.Is(err, asif.ErrTooManyValues):
		return statusErr(ExitFailure, "the document of tree %q would exceed the bounds of one ASIF document (64 MiB, 4,194,304 values): export smaller windows with --after and --until", pos[1])
	case errors.As(err, &readErr) || errors.As(err, &schemaErr) || errors.As(err, &ruleErr) || errors.Is(err, asif.ErrUnsupportedVersion):
		return statusErr(ExitFailure, "the exported document fails its own check (a bug in skulk-host; please report it): %v", err)
	case err != nil:
		return statusErr(ExitFailure, "cannot export tree %q: %v", pos[1], err)
	}
	data := session.JSON
	where := "standard output"
	if *out == "" {
		if _, err := env.Stdout.Write(data); err != nil {
			return err
		}
	} else {
		if err := writeFileAtomic(*out, data); err != nil {
			return statusErr(ExitFailure, "cannot write %s: %v", *out, err)
		}
		where = *out
	}
	losses := "no losses"
	switch len(session.LossKinds) {
	case 0:
	case 1:
		losses = "1 loss: " + session.LossKinds[0]
	default:
		losses = fmt.Sprintf("%d losses: %s", len(session.LossKinds), countKinds(session.LossKinds))
	}
	fmt.Fprintf(env.Stderr, "wrote %s (%s): %d events, %d streams, %d external bindings; %s (the document's losses say what each is)\n",
		where, formatBytes(int64(len(data))), session.Events, session.Streams, session.ExternalBindings, losses)
	return nil
}

// writeFileAtomic writes data to a temporary file beside path and renames
// it, so that a reader never sees half a document.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// checkReport is the --json output of asif check.
type checkReport struct {
	File     string             `json:"file"`
	Valid    bool               `json:"valid"`
	Version  string             `json:"asif_version,omitempty"`
	Streams  []*asif.Assembly   `json:"streams"`
	Branches []asif.BranchState `json:"branches"`
	Refusals []asifRefusal      `json:"refusals"`
	// Unchecked lists the rule families not checked whose records the
	// document holds; NotChecked every rule family the checker does not
	// check.
	Unchecked  []asif.Family `json:"unchecked"`
	NotChecked []asif.Family `json:"not_checked"`
	// checked says the document got as far as the rule checks (it was
	// JSON of a version this checker reads): only then do the families
	// it does not check say anything about it.
	checked bool
	// Error is the refusal of a layer before the rules (JSON, version,
	// schema); empty otherwise.
	Error string `json:"error,omitempty"`
	// Violations lists the schema violations (at most asif.MaxViolations).
	Violations []asif.Violation `json:"schema_violations,omitempty"`
}

// versionRefusal is the rule name asif check reports for a document whose
// asif_version is missing or not 0.5 (an *asif.VersionError).
const versionRefusal = "version_unsupported"

type asifRefusal struct {
	Rule     string `json:"rule"`
	Object   string `json:"object"`
	ObjectID string `json:"id"`
	Segment  *int   `json:"segment,omitempty"`
}

func runASIFCheck(args []string, env Env) error {
	fs := flag.NewFlagSet("asif check", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "")
	pos, child, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(child) > 0 || len(pos) != 1 {
		return usageErr("asif check wants one FILE (- for standard input)")
	}
	name := pos[0]
	var (
		data []byte
		opts asif.Options
	)
	if name == "-" {
		data, err = asif.Read(env.Stdin)
	} else {
		var f *os.File
		f, err = os.Open(name)
		if err == nil {
			data, err = asif.Read(f)
			f.Close()
		}
		if root, rerr := os.OpenRoot(filepath.Dir(name)); rerr == nil {
			defer root.Close()
			opts.Files = root.FS()
		}
	}
	var re *asif.ReadError
	if err != nil && !errors.As(err, &re) {
		return statusErr(ExitFailure, "cannot read %s: %v", name, err)
	}
	var rep *asif.Report
	if err == nil {
		rep, err = asif.Check(data, opts)
	}
	cr := reportOf(name, rep, err)
	if *asJSON {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(cr); err != nil {
			return statusErr(ExitFailure, "cannot encode the report: %v", err)
		}
		if _, err := env.Stdout.Write(buf.Bytes()); err != nil {
			return err
		}
	} else {
		printCheckHuman(env.Stdout, cr)
	}
	if err == nil {
		return nil
	}
	var first string
	switch {
	case len(cr.Refusals) > 0:
		r := cr.Refusals[0]
		first = fmt.Sprintf("rule %s (%s %q)", r.Rule, r.Object, r.ObjectID)
	default:
		first = cr.Error
	}
	n := max(len(cr.Refusals), 1)
	return statusErr(ExitFailure, "%s refused: %d refusal(s), the first: %s", name, n, first)
}

// reportOf turns Check's outcome into the report asif check prints.
func reportOf(name string, rep *asif.Report, err error) checkReport {
	cr := checkReport{File: name, Valid: rep.Valid(err), Streams: []*asif.Assembly{}, Branches: []asif.BranchState{},
		Refusals: []asifRefusal{}, Unchecked: []asif.Family{}, NotChecked: asif.UncheckedFamilies()}
	if rep != nil {
		cr.checked = true
		cr.Version = rep.Version
		cr.Unchecked = rep.Unchecked
		if rep.Streams != nil {
			cr.Streams = rep.Streams
		}
		if rep.Branches != nil {
			cr.Branches = rep.Branches
		}
	}
	if err == nil {
		return cr
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var ruleErr *asif.RuleError
		var schemaErr *asif.SchemaError
		var versionErr *asif.VersionError
		switch {
		case errors.As(e, &versionErr):
			// Found is empty unless it looks like a version number, so
			// document content is never echoed.
			cr.Refusals = append(cr.Refusals, asifRefusal{Rule: versionRefusal, Object: "asif_version", ObjectID: versionErr.Found})
			cr.Error = oneLine(e.Error())
		case errors.As(e, &ruleErr):
			r := asifRefusal{Rule: ruleErr.Rule.String(), Object: ruleErr.Object, ObjectID: ruleErr.ObjectID}
			if ruleErr.Segment >= 0 {
				seg := ruleErr.Segment
				r.Segment = &seg
			}
			cr.Refusals = append(cr.Refusals, r)
		case errors.As(e, &schemaErr):
			cr.Error = oneLine(e.Error())
			cr.Violations = schemaErr.Violations
		default:
			cr.Error = oneLine(e.Error())
		}
	}
	return cr
}

// printCheckHuman writes the report for a person. Every string the
// document chose (ids, kinds, statuses, arguments, and the file name) is
// escaped with termsafe: a captured stream or a tool's arguments may hold
// whatever a child sent. --json writes them exact.
func printCheckHuman(w io.Writer, cr checkReport) {
	esc := termsafe.Escape
	verdict := "valid"
	switch {
	case len(cr.Refusals) > 0 || cr.Error != "":
		verdict = "REFUSED"
	case !cr.Valid:
		verdict = "NOT ESTABLISHED (no refusal, but it holds records of rule families not checked: " + joinFamilies(cr.Unchecked) + ")"
	}
	version := cr.Version
	if version == "" {
		version = "?"
	}
	fmt.Fprintf(w, "%s: %s (asif %s, %d streams)\n", esc(cr.File), verdict, esc(version), len(cr.Streams))
	for _, s := range cr.Streams {
		line := fmt.Sprintf("  stream %s  %s of %s (call %s)  %s, %s assembled", esc(s.StreamID), esc(string(s.Kind)), esc(s.EventID), esc(s.CallID), esc(string(s.Status)), formatBytes(int64(s.Size)))
		if s.Declared != s.Status {
			line += " (declared " + esc(string(s.Declared)) + ")"
		}
		if s.Executable {
			line += ", executable"
		}
		fmt.Fprintln(w, line)
	}
	for _, b := range cr.Branches {
		for _, c := range b.Calls {
			where := "event " + esc(c.EventID)
			if c.External != nil {
				where = "external binding to " + esc(c.External.CaptureID) + "/" + esc(c.External.EventID)
			}
			state := "open"
			if c.Terminal {
				state = "ended " + esc(string(c.Outcome))
			}
			fmt.Fprintf(w, "  call %s  %s, %s; arguments %s %s; %d results, %s\n",
				esc(c.CallID), esc(c.ToolID), where, esc(string(c.ArgumentsStatus)), esc(shorten(string(c.Arguments), 120)), c.Results, state)
		}
	}
	for _, r := range cr.Refusals {
		seg := ""
		if r.Segment != nil {
			seg = fmt.Sprintf(" segment %d", *r.Segment)
		}
		// %q escapes every control and format character of the id.
		fmt.Fprintf(w, "  refused: rule %s (%s %q%s)\n", esc(r.Rule), esc(r.Object), r.ObjectID, seg)
	}
	if cr.Error != "" && (len(cr.Refusals) == 0 || cr.Refusals[0].Rule != versionRefusal) {
		fmt.Fprintf(w, "  refused: %s\n", esc(cr.Error))
	}
	if len(cr.Unchecked) > 0 {
		fmt.Fprintf(w, "  not checked, present: %s\n", joinFamilies(cr.Unchecked))
	}
	if cr.checked {
		fmt.Fprintf(w, "  rule families this checker does not check: %s\n", joinFamilies(cr.NotChecked))
	}
}

func joinFamilies(fs []asif.Family) string {
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.String()
	}
	return strings.Join(names, ", ")
}

// shorten cuts s to at most n bytes at a rune boundary, marking the cut.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return strings.TrimSpace(s[:cut]) + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// countKinds lists kinds once each, in the order first met, a kind met
// more than once with its count: "a, b (2), c".
func countKinds(kinds []string) string {
	var order []string
	n := map[string]int{}
	for _, k := range kinds {
		if n[k] == 0 {
			order = append(order, k)
		}
		n[k]++
	}
	for i, k := range order {
		if n[k] > 1 {
			order[i] = fmt.Sprintf("%s (%d)", k, n[k])
		}
	}
	return strings.Join(order, ", ")
}
