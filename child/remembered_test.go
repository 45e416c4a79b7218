package child

import (
	"strconv"
	"testing"
)

func TestRememberedKeepsTheMostRecent1024(t *testing.T) {
	var r remembered
	r.init()
	for i := range 1500 {
		r.add("id" + strconv.Itoa(i))
	}
	r.add("id1499") // already there: no second slot
	for i := range 476 {
		if r.take("id" + strconv.Itoa(i)) {
			t.Fatalf("id%d should have been forgotten", i)
		}
	}
	if !r.take("id476") || !r.take("id1499") {
		t.Fatal("recent ids forgotten")
	}
	if r.take("id1499") {
		t.Fatal("take does not forget")
	}
	// A forgotten id added again survives the eviction of its old slot.
	r.add("id500")
	r.take("id500")
	r.add("id500")
	for i := range rememberedCancels - 1 {
		r.add("new" + strconv.Itoa(i))
	}
	if !r.take("id500") {
		t.Fatal("re-added id lost with its old slot")
	}
	if len(r.slot) > rememberedCancels {
		t.Fatalf("%d ids remembered", len(r.slot))
	}
}

// TestCancelOfEndedCallRemembered: a cancel for a call whose end is
// written names an id the child no longer knows, even while the call is
// still in the table (its runner has yet to take it out): the id is
// remembered, and the running call it names is not cancelled.
func TestCancelOfEndedCallRemembered(t *testing.T) {
	s := newServer(nil, nil, &Options{})
	ended, running := timedCall(), timedCall()
	ended.over.Store(true)
	s.calls["ended"], s.calls["running"] = ended, running
	s.cancelCall("ended")
	s.cancelCall("running")
	if !s.remembered.take("ended") {
		t.Error("the ended call's id was not remembered")
	}
	if s.remembered.take("running") {
		t.Error("the running call's id was remembered")
	}
	if ended.ctx.Err() != nil {
		t.Error("the ended call was cancelled")
	}
	if running.ctx.Err() == nil {
		t.Error("the running call was not cancelled")
	}
}
