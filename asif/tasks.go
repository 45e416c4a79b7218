package asif

// This file checks the core references (actors, executions, causes,
// branches, checkpoints) and the task rules of SEMANTICS §15 and §16.

// task is one task_update event's data.
type task struct {
	id       string
	revision int64
	status   string
	prev     int64
	hasPrev  bool
	deps     []string
	hasDeps  bool
	reopened bool // reopen_reason present (the schema makes it non-empty)
}

// taskKey is a (task_id, revision) pair.
type taskKey struct {
	id       string
	revision int64
}

func loadTask(d map[string]any) *task {
	t := &task{id: str(d, "task_id"), revision: integer(d, "revision"), status: str(d, "status")}
	if has(d, "previous_revision") {
		t.prev, t.hasPrev = integer(d, "previous_revision"), true
	}
	if deps, ok := d["dependencies"].([]any); ok {
		t.hasDeps = true
		for _, x := range deps {
			s, _ := x.(string)
			t.deps = append(t.deps, s)
		}
	}
	t.reopened = str(d, "reopen_reason") != ""
	return t
}

// references checks that actors, executions and local causes resolve, that
// causes point to earlier events (in the document and in every branch),
// that every branch ends at its head, and that checkpoints name what
// exists.
func (c *checker) references(root map[string]any) {
	participants := map[string]bool{}
	for _, p := range objects(root, "participants") {
		participants[str(p, "id")] = true
	}
	executions := map[string]bool{}
	for _, x := range objects(root, "executions") {
		executions[str(x, "id")] = true
	}
	for _, e := range c.eventList {
		if !participants[e.actor] {
			c.refuse(RuleEventActorUndeclared, "event", e.id)
		}
		if e.hasExec && !executions[e.exec] {
			c.refuse(RuleEventExecutionUndeclared, "event", e.id)
		}
		for _, id := range e.causes {
			switch p := c.events[id]; {
			case p == nil:
				c.refuse(RuleEventCauseMissing, "event", e.id)
			case p.pos >= e.pos:
				c.refuse(RuleEventCauseOrder, "event", e.id)
			}
		}
	}
	branchEvents := map[string]map[string]int{}
	for _, b := range objects(root, "branches") {
		id := str(b, "id")
		ids := arr(b, "event_ids")
		at := make(map[string]int, len(ids)) // the schema makes ids unique
		for i, x := range ids {
			s, _ := x.(string)
			at[s] = i
		}
		head, _ := b["head_event_id"].(string)
		last := ""
		if len(ids) > 0 {
			last, _ = ids[len(ids)-1].(string)
		}
		if head != last || (len(ids) > 0 && last == "") {
			c.refuse(RuleBranchHead, "branch", id)
		}
		for i, x := range ids {
			s, _ := x.(string)
			e := c.events[s]
			if e == nil {
				continue
			}
			for _, cause := range e.causes {
				if j, ok := at[cause]; ok && j > i {
					c.refuse(RuleBranchCauseOrder, "branch", id)
					break
				}
			}
		}
		if _, seen := branchEvents[id]; !seen {
			branchEvents[id] = at
		}
	}
	for _, cp := range objects(root, "checkpoints") {
		id := str(cp, "id")
		at, ok := branchEvents[str(cp, "branch_id")]
		if !ok {
			c.refuse(RuleCheckpointBranchMissing, "checkpoint", id)
		} else if ev, isStr := cp["at_event_id"].(string); isStr {
			if _, in := at[ev]; !in {
				c.refuse(RuleCheckpointEventNotInBranch, "checkpoint", id)
			}
		}
		for _, oc := range objects(cp, "open_calls") {
			call := str(oc, "call_id")
			_, local := c.calls[call]
			_, bound := c.callBindings[call]
			if !local && !bound {
				c.refuse(RuleCheckpointCallUnknown, "checkpoint", id)
				break
			}
		}
		for _, t := range objects(cp, "tasks") {
			if c.taskRevisions[taskKey{str(t, "task_id"), integer(t, "revision")}] == nil {
				c.refuse(RuleCheckpointTaskUnknown, "checkpoint", id)
				break
			}
		}
	}
}

// tasksCoveragePartial reports whether the tasks coverage record is
// partial (the only status under which a selected history may begin a task
// after an omitted predecessor).
func tasksCoveragePartial(root map[string]any) bool {
	for _, cv := range objects(root, "coverage") {
		if str(cv, "scope") == "tasks" {
			return str(cv, "status") == "partial"
		}
	}
	return false
}

// taskRules checks (task_id, revision) identity and dependencies over the
// document, then the revision transitions and the dependency graph of each
// branch's selected history, update by update (SEMANTICS §16: the graph
// must be acyclic after each selected update, not only at the head).
func (c *checker) taskRules(root map[string]any) {
	ids := map[string]bool{}
	for _, e := range c.eventList {
		if e.task != nil {
			ids[e.task.id] = true
		}
	}
	for _, e := range c.eventList {
		t := e.task
		if t == nil {
			continue
		}
		if t.hasPrev && t.prev >= t.revision {
			c.refuse(RuleTaskRevisionOrder, "event", e.id)
		}
		for _, d := range t.deps {
			switch {
			case d == t.id:
				c.refuse(RuleTaskDependencySelf, "event", e.id)
			case !ids[d]:
				c.refuse(RuleTaskDependencyMissing, "event", e.id)
			}
		}
	}
	partial := tasksCoveragePartial(root)
	// A branch that selects an event twice is refused already; the same
	// update refused on several branches is reported once per rule.
	seen := map[[2]string]bool{}
	refuse := func(r Rule, id string) {
		if k := [2]string{string(r), id}; !seen[k] {
			seen[k] = true
			c.refuse(r, "event", id)
		}
	}
	for _, br := range c.branches {
		current := map[string]*task{}
		for _, id := range br.eventIDs {
			e := c.events[id]
			t := e.task
			if t == nil {
				continue
			}
			cur := current[t.id]
			switch {
			case cur != nil && (!t.hasPrev || t.prev != cur.revision):
				refuse(RuleTaskPredecessorMismatch, e.id)
			case cur == nil && t.hasPrev && !partial:
				refuse(RuleTaskPredecessorGap, e.id)
			}
			if cur != nil && terminalTask(cur.status) && activeTask(t.status) && !t.reopened {
				refuse(RuleTaskReopenWithoutReason, e.id)
			}
			current[t.id] = t
			if t.hasDeps && dependsOn(current, t.deps, t.id) {
				refuse(RuleTaskDependencyCycle, e.id)
			}
		}
	}
}

func terminalTask(s string) bool {
	return s == "completed" || s == "failed" || s == "cancelled" || s == "superseded"
}

func activeTask(s string) bool { return s == "proposed" || s == "pending" || s == "in_progress" }

// dependsOn reports whether target is reachable from deps over the current
// revisions' known dependency lists. Before this update the graph was
// acyclic (or already refused), so a new cycle passes through target.
func dependsOn(current map[string]*task, deps []string, target string) bool {
	visited := map[string]bool{}
	stack := append([]string(nil), deps...)
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if n == target {
			return true
		}
		if visited[n] {
			continue
		}
		visited[n] = true
		if t := current[n]; t != nil && t.hasDeps {
			stack = append(stack, t.deps...)
		}
	}
	return false
}
