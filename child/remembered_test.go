package child

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRememberedKeepsTheMostRecent1024(t *testing.T) {
	var r remembered
	r.init()
	for i := range 1500 {
		r.add("id" + strconv.Itoa(i))
	}
	r.add("id1499") // already there: no second slot
	for i := range 476 {
		require.Falsef(t, r.take("id"+strconv.Itoa(i)), "id%d should have been forgotten", i)
	}
	require.False(t, !r.take("id476") || !r.take("id1499"), "recent ids forgotten")
	require.False(t, r.take("id1499"), "take does not forget")
	// A forgotten id added again survives the eviction of its old slot.
	r.add("id500")
	r.take("id500")
	r.add("id500")
	for i := range rememberedCancels - 1 {
		r.add("new" + strconv.Itoa(i))
	}
	require.True(t, r.take("id500"), "re-added id lost with its old slot")
	require.Falsef(t, len(r.slot) > rememberedCancels, "%d ids remembered", len(r.slot))
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
	assert.True(t, s.remembered.take("ended"), "the ended call's id was not remembered")
	assert.False(t, s.remembered.take("running"), "the running call's id was remembered")
	assert.False(t, ended.ctx.Err() != nil, "the ended call was cancelled")
	assert.False(t, running.ctx.Err() == nil, "the running call was not cancelled")
}
