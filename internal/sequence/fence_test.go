package sequence

import (
	"errors"
	"testing"

	"github.com/skulkrt/skulk/frame"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func fr(callID string, dir frame.Direction, seq uint64, k frame.Kind) *frame.Frame {
	return &frame.Frame{CallID: callID, Direction: dir, Sequence: seq, Kind: k}
}

const c2p, p2c = frame.CallerToProvider, frame.ProviderToCaller

var refusals = []error{ErrStaleCall, ErrWrongDirection, ErrGap, ErrDuplicate, ErrDuplicateTerminal, ErrAfterTerminal}

// requireRefusal checks that err is want and no other refusal.
func requireRefusal(t *testing.T, err, want error) {
	t.Helper()
	require.ErrorIs(t, err, want)
	require.ErrorIs(t, err, ErrRefused)
	for _, other := range refusals {
		if other != want {
			require.NotErrorIs(t, err, other)
		}
	}
}

func TestAcceptInOrder(t *testing.T) {
	f := New("c1", c2p, 0)
	require.Equal(t, "c1", f.callID)
	require.Equal(t, c2p, f.dir)
	require.NoError(t, f.Accept(fr("c1", c2p, 0, frame.KindStarted)))
	for i := uint64(1); i <= 5; i++ {
		require.NoError(t, f.Accept(fr("c1", c2p, i, frame.KindChunk)))
		require.Equal(t, i+1, f.Next())
		require.False(t, f.Closed())
	}
	require.NoError(t, f.Accept(fr("c1", c2p, 6, frame.KindCompleted)))
	require.True(t, f.Closed())
	require.Equal(t, uint64(7), f.Next())
}

func TestProviderDirectionStartsAtOne(t *testing.T) {
	f := New("c1", p2c, 1)
	requireRefusal(t, f.Accept(fr("c1", p2c, 0, frame.KindStarted)), ErrDuplicate)
	require.NoError(t, f.Accept(fr("c1", p2c, 1, frame.KindChunk)))
}

// TestRefusals has one case per refusal of docs/protocol.md §4.2, and checks that
// a refused frame changes nothing.
func TestRefusals(t *testing.T) {
	cases := []struct {
		name  string
		setup []*frame.Frame // accepted first
		f     *frame.Frame
		want  error
	}{
		{"stale call", nil, fr("c0", p2c, 1, frame.KindChunk), ErrStaleCall},
		{"stale call wins over direction", nil, fr("c0", c2p, 1, frame.KindChunk), ErrStaleCall},
		{"wrong direction", nil, fr("c1", c2p, 1, frame.KindChunk), ErrWrongDirection},
		{"gap", nil, fr("c1", p2c, 2, frame.KindChunk), ErrGap},
		{"gap on a terminal", nil, fr("c1", p2c, 9, frame.KindCompleted), ErrGap},
		{"duplicate", []*frame.Frame{fr("c1", p2c, 1, frame.KindChunk)}, fr("c1", p2c, 1, frame.KindChunk), ErrDuplicate},
		{"replay of an older one", []*frame.Frame{fr("c1", p2c, 1, frame.KindChunk), fr("c1", p2c, 2, frame.KindChunk)}, fr("c1", p2c, 1, frame.KindChunk), ErrDuplicate},
		{"duplicate terminal", []*frame.Frame{fr("c1", p2c, 1, frame.KindCompleted)}, fr("c1", p2c, 2, frame.KindFailed), ErrDuplicateTerminal},
		{"replayed terminal", []*frame.Frame{fr("c1", p2c, 1, frame.KindCancelled)}, fr("c1", p2c, 1, frame.KindCancelled), ErrDuplicateTerminal},
		{"after terminal", []*frame.Frame{fr("c1", p2c, 1, frame.KindFailed)}, fr("c1", p2c, 2, frame.KindChunk), ErrAfterTerminal},
		{"after terminal, in the past", []*frame.Frame{fr("c1", p2c, 1, frame.KindChunk), fr("c1", p2c, 2, frame.KindCompleted)}, fr("c1", p2c, 1, frame.KindChunk), ErrAfterTerminal},
		{"stale call after terminal", []*frame.Frame{fr("c1", p2c, 1, frame.KindCompleted)}, fr("c2", p2c, 2, frame.KindChunk), ErrStaleCall},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := New("c1", p2c, 1)
			for _, s := range c.setup {
				require.NoError(t, f.Accept(s))
			}
			next, closed := f.Next(), f.Closed()
			err := f.Accept(c.f)
			requireRefusal(t, err, c.want)
			require.Equal(t, next, f.Next(), "a refused frame changes nothing")
			require.Equal(t, closed, f.Closed())
			require.NotContains(t, err.Error(), "c0", "never echoes the call id")
			if !f.Closed() {
				require.NoError(t, f.Accept(fr("c1", p2c, f.Next(), frame.KindChunk)), "still accepts the expected frame")
			}
		})
	}
}

func TestRefusalsAreDistinct(t *testing.T) {
	for i, a := range refusals {
		require.True(t, errors.Is(a, ErrRefused))
		for j, b := range refusals {
			require.Equal(t, i == j, errors.Is(a, b), "%v vs %v", a, b)
		}
	}
}

func TestGapMessageNamesSequences(t *testing.T) {
	f := New("c1", c2p, 0)
	err := f.Accept(fr("c1", c2p, 5, frame.KindChunk))
	require.EqualError(t, err, "sequence: sequence gap: got 5, want 0")
}
