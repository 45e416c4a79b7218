package cli

import (
	"github.com/skulkrt/skulk/calllog"
)

// maxLinkedTrees bounds the trees follow and replay --follow-links read
// after the one named: the links of a fleet's trees may reach many.
const maxLinkedTrees = 64

// linkedTree is a tree --follow-links has still to read, and the call (in
// a tree read already) whose link named it.
type linkedTree struct {
	tree string
	from calllog.Link
}

// linkQueue holds the trees --follow-links has to read: each tree once,
// in the order its link was seen, at most maxLinkedTrees (the rest are
// counted in dropped). Used by one goroutine.
type linkQueue struct {
	seen    map[string]bool
	next    []linkedTree // at most maxLinkedTrees over the queue's life
	taken   int
	dropped int
}

func newLinkQueue(first string) *linkQueue {
	return &linkQueue{seen: map[string]bool{first: true}}
}

// add queues the tree a link of call (of tree from) names, unless it was
// seen already or the bound is reached.
func (q *linkQueue) add(fromTree, fromCall string, l *calllog.Link) {
	if l == nil || q.seen[l.Tree] {
		return
	}
	q.seen[l.Tree] = true
	if q.taken+len(q.next) >= maxLinkedTrees {
		q.dropped++
		return
	}
	q.next = append(q.next, linkedTree{tree: l.Tree, from: calllog.Link{Tree: fromTree, Call: fromCall}})
}

// addEvent queues the trees ev's links name.
func (q *linkQueue) addEvent(ev calllog.Event) {
	q.add(ev.Tree, ev.Call, ev.Remote)
	q.add(ev.Tree, ev.Call, ev.Caller)
}

// pop returns the next tree to read; false when none is left.
func (q *linkQueue) pop() (linkedTree, bool) {
	if len(q.next) == 0 {
		return linkedTree{}, false
	}
	lt := q.next[0]
	q.next = q.next[1:]
	q.taken++
	return lt, true
}
