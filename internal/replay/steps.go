package replay

import (
	"iter"

	"github.com/skulkrt/skulk/calllog"
)

// Step is one event calllog.Follow showed, with what happened before it
// that the reader could not see: what skulk-host follow prints.
type Step struct {
	// Event is the event; its After is the previous event shown (0 for the
	// first).
	Event calllog.Event
	// LostFrom and LostTo, when LostFrom is not 0, are the Seqs (inclusive)
	// missing between the previous event shown and this one.
	LostFrom, LostTo uint64
	// TakenOverFrom, when not "", is the writer of the previous event
	// shown: Event's writer took the tree over from it.
	TakenOverFrom string
}

// Steps turns the events of a calllog.Follow from the start of a tree into
// steps: a gap is a Seq more than one past the event's After, a takeover
// a writer other than the previous event's. Errors pass through.
func Steps(events iter.Seq2[calllog.Event, error]) iter.Seq2[Step, error] {
	return func(yield func(Step, error) bool) {
		prev := ""
		for e, err := range events {
			if err != nil {
				if !yield(Step{}, err) {
					return
				}
				continue
			}
			s := Step{Event: e}
			if e.Seq > e.After+1 {
				s.LostFrom, s.LostTo = e.After+1, e.Seq-1
			}
			if prev != "" && e.Writer != prev {
				s.TakenOverFrom = prev
			}
			prev = e.Writer
			if !yield(s, nil) {
				return
			}
		}
	}
}
