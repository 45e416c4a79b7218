package asif

// Family names a family of ASIF 0.5 semantic rules that Check does not
// check. When a document holds the records such a family governs, Check
// cannot establish that the document is valid: it reports the family in
// Report.Unchecked even when no checked rule refuses the document.
type Family string

// String returns the family name as it appears in reports.
func (f Family) String() string { return string(f) }

// Rule families of ASIF 0.5 that Check does not check, each with the
// records whose presence puts it in Report.Unchecked.
const (
	// FamilyContexts: typed request contexts (SEMANTICS §8, CONTINUATION
	// §4): input order and selection, typed call and result inputs
	// against their events, fidelity claims. Present when contexts is not
	// empty.
	FamilyContexts Family = "contexts"
	// FamilyConfigurations: configuration snapshots and their references
	// (SEMANTICS §9). Present when configurations is not empty.
	FamilyConfigurations Family = "configurations"
	// FamilyEnvironments: environments and their requirements
	// (SEMANTICS §9). Present when environments is not empty.
	FamilyEnvironments Family = "environments"
	// FamilyExecutions: execution records, their participants and
	// contexts, and lifecycle transitions (SEMANTICS §4, §15). Present when
	// executions is not empty or an execution_transition event appears.
	FamilyExecutions Family = "executions"
	// FamilyDecisions: decision requests and resolutions, their bindings
	// to calls and task revisions, contradictory resolutions (SEMANTICS §6,
	// §15). Present when a decision_request or decision_resolution event
	// appears.
	FamilyDecisions Family = "decisions"
	// FamilyCorrections: supersedes on events other than tool_call
	// (SEMANTICS §5, §15: an earlier event of the same kind, acyclic).
	// Present when such an event carries supersedes.
	FamilyCorrections Family = "corrections"
	// FamilyExtensions: extension events and interpretation_required
	// (SEMANTICS §12). Present when an extension event appears.
	FamilyExtensions Family = "extensions"
	// FamilyLineage: session lineage and branch forks (SEMANTICS §3, §7).
	// Present when session.lineage is not empty or a branch has a fork.
	FamilyLineage Family = "lineage"
	// FamilyResourceChanges: resource_change events (SEMANTICS §9).
	// Present when one appears.
	FamilyResourceChanges Family = "resource_changes"
	// FamilyCheckpointState: a checkpoint's open decisions and
	// requirements (SEMANTICS §11). Present when a checkpoint lists any.
	FamilyCheckpointState Family = "checkpoint_state"
	// FamilyUsage: usage records (SEMANTICS §12). Present when usage is
	// not empty.
	FamilyUsage Family = "usage"
)

// UncheckedFamilies returns every rule family Check does not check, in
// the order of their declaration (a fresh slice on every call).
func UncheckedFamilies() []Family {
	return []Family{
		FamilyContexts, FamilyConfigurations, FamilyEnvironments, FamilyExecutions,
		FamilyDecisions, FamilyCorrections, FamilyExtensions, FamilyLineage,
		FamilyResourceChanges, FamilyCheckpointState, FamilyUsage,
	}
}

// uncheckedPresent returns the unchecked families whose records the
// schema-valid document holds, in UncheckedFamilies order.
func uncheckedPresent(root map[string]any) []Family {
	present := map[Family]bool{
		FamilyContexts:       len(arr(root, "contexts")) > 0,
		FamilyConfigurations: len(arr(root, "configurations")) > 0,
		FamilyEnvironments:   len(arr(root, "environments")) > 0,
		FamilyExecutions:     len(arr(root, "executions")) > 0,
		FamilyLineage:        len(arr(obj(root, "session"), "lineage")) > 0,
		FamilyUsage:          len(arr(root, "usage")) > 0,
	}
	for _, e := range objects(root, "events") {
		switch k := str(e, "kind"); k {
		case "execution_transition":
			present[FamilyExecutions] = true
		case "decision_request", "decision_resolution":
			present[FamilyDecisions] = true
		case "extension":
			present[FamilyExtensions] = true
		case "resource_change":
			present[FamilyResourceChanges] = true
		}
		if has(e, "supersedes") && str(e, "kind") != "tool_call" {
			present[FamilyCorrections] = true
		}
	}
	for _, b := range objects(root, "branches") {
		if has(b, "fork") {
			present[FamilyLineage] = true
		}
	}
	for _, cp := range objects(root, "checkpoints") {
		if len(arr(cp, "open_decisions")) > 0 || len(arr(cp, "requirements")) > 0 {
			present[FamilyCheckpointState] = true
		}
	}
	out := []Family{}
	for _, f := range UncheckedFamilies() {
		if present[f] {
			out = append(out, f)
		}
	}
	return out
}
