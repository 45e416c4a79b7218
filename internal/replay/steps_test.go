package replay_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/internal/replay"
)

// Steps shows a gap where an event's Seq is past its After + 1, a takeover
// where its writer differs from the previous event's, and passes errors.
func TestSteps(t *testing.T) {
	boom := errors.New("boom")
	events := func(yield func(calllog.Event, error) bool) {
		for _, e := range []struct {
			ev  calllog.Event
			err error
		}{
			{calllog.Event{Seq: 2, Writer: "A"}, nil},           // 1 lost before the first
			{calllog.Event{Seq: 3, After: 2, Writer: "A"}, nil}, // none lost
			{calllog.Event{}, boom},
			{calllog.Event{Seq: 7, After: 3, Writer: "B"}, nil}, // 4..6 lost, taken over from A
		} {
			if !yield(e.ev, e.err) {
				return
			}
		}
	}
	var got []replay.Step
	var errs []error
	for s, err := range replay.Steps(events) {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		got = append(got, s)
	}
	require.Len(t, got, 3)
	assert.Equal(t, []error{boom}, errs)
	assert.Equal(t, [2]uint64{1, 1}, [2]uint64{got[0].LostFrom, got[0].LostTo})
	assert.Empty(t, got[0].TakenOverFrom)
	assert.Zero(t, got[1].LostFrom)
	assert.Empty(t, got[1].TakenOverFrom)
	assert.Equal(t, [2]uint64{4, 6}, [2]uint64{got[2].LostFrom, got[2].LostTo})
	assert.Equal(t, "A", got[2].TakenOverFrom)
}
