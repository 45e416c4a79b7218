package asif

import "encoding/json"

// ArgumentsStatus is a tool call's argument knowledge.
type ArgumentsStatus string

// Argument knowledge, in the only order it may progress:
// unknown → partial → complete (unknown may also jump to complete).
const (
	ArgumentsUnknown  ArgumentsStatus = "unknown"
	ArgumentsPartial  ArgumentsStatus = "partial"
	ArgumentsComplete ArgumentsStatus = "complete"
)

// String returns the status as written in documents.
func (s ArgumentsStatus) String() string { return string(s) }

// Outcome is a tool result's outcome; non-terminal results are unknown.
type Outcome string

// Tool result outcomes.
const (
	OutcomeSuccess   Outcome = "success"
	OutcomeError     Outcome = "error"
	OutcomeCancelled Outcome = "cancelled"
	OutcomeUnknown   Outcome = "unknown"
)

// String returns the outcome as written in documents.
func (o Outcome) String() string { return string(o) }

// BranchState is the selected state of every call in one branch's selected
// history.
type BranchState struct {
	// BranchID is the branch's id.
	BranchID string `json:"id"`
	// Calls lists the calls in order of first appearance: external call
	// bindings first (in binding order), then local calls in branch order.
	Calls []*CallState `json:"calls"`
}

// CallState is one invocation's state after its branch's selected history.
type CallState struct {
	// CallID is the invocation's call_id.
	CallID string `json:"call_id"`
	// ToolID is the tool's id.
	ToolID string `json:"tool_id"`
	// EventID is the selected local tool_call version (the last amendment
	// in branch order). It is empty when the call is known only from an
	// external binding: no local event is ever synthesized for a binding.
	EventID string `json:"event_id,omitempty"`
	// External is the binding's source when the call is known only from an
	// external binding, otherwise nil.
	External *BindingSource `json:"external,omitempty"`
	// Arguments is the selected version's exact arguments value (canonical
	// JSON: keys sorted, numbers as written).
	Arguments json.RawMessage `json:"arguments"`
	// ArgumentsStatus is the selected version's argument knowledge.
	ArgumentsStatus ArgumentsStatus `json:"arguments_status"`
	// Results counts the results selected for this call.
	Results int `json:"results"`
	// Terminal is true once a terminal result closed the invocation.
	Terminal bool `json:"terminal"`
	// Outcome is the terminal result's outcome; empty while not terminal.
	Outcome Outcome `json:"outcome,omitempty"`
	// TerminalEventID is the terminal result's event id.
	TerminalEventID string `json:"terminal_event_id,omitempty"`
}

// BindingSource names the exact source of an external binding.
type BindingSource struct {
	SessionID string `json:"session_id"`
	CaptureID string `json:"capture_id"`
	EventID   string `json:"event_id"`
}

// selectedStates folds each branch's selected history into call states.
// Amendments replace the known arguments of the same invocation; a
// terminal result is never reopened by a later amendment.
func (c *checker) selectedStates() []BranchState {
	out := []BranchState{}
	for _, br := range c.branches {
		bs := BranchState{BranchID: br.id, Calls: []*CallState{}}
		byID := map[string]*CallState{}
		for _, b := range c.bindings {
			if b.kind != "call" || byID[b.id] != nil {
				continue
			}
			src := b.source
			st := &CallState{
				CallID:          b.id,
				ToolID:          b.toolID,
				External:        &src,
				Arguments:       canonical(b.args),
				ArgumentsStatus: ArgumentsStatus(b.argsStatus),
			}
			byID[b.id] = st
			bs.Calls = append(bs.Calls, st)
		}
		for _, id := range br.eventIDs {
			e := c.events[id]
			switch e.kind {
			case "tool_call":
				st := byID[e.callID]
				switch {
				case st == nil:
					st = &CallState{CallID: e.callID}
					byID[e.callID] = st
					bs.Calls = append(bs.Calls, st)
				case st.EventID != "" &&
					(e.supersedes == nil || e.supersedes.external || e.supersedes.eventID != st.EventID):
					c.refuse(RuleBranchCallVersion, "branch", br.id)
				}
				st.ToolID = e.toolID
				st.EventID = e.id
				st.External = nil
				st.Arguments = canonical(e.args)
				st.ArgumentsStatus = ArgumentsStatus(e.argsStatus)
			case "tool_result":
				st := byID[e.callID]
				if st == nil {
					continue // refused as RuleResultWithoutCall
				}
				st.Results++
				if e.terminal && !st.Terminal {
					st.Terminal = true
					st.Outcome = Outcome(e.outcome)
					st.TerminalEventID = e.id
				}
			}
		}
		out = append(out, bs)
	}
	return out
}
