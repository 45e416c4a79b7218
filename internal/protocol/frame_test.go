package protocol

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
)

// TestKnownCodeAgreesWithFrame: KnownCode accepts exactly the codes a
// failed or cancelled frame may carry by frame.Frame.Validate (cancelled
// is the one code of a cancelled frame, and a failed frame's other five).
func TestKnownCodeAgreesWithFrame(t *testing.T) {
	known := 0
	for i := range 256 {
		c := frame.Code(i)
		failed := frame.Frame{CallID: "c", Direction: frame.ProviderToCaller, Sequence: 1, Kind: frame.KindFailed,
			Error: &frame.Error{Code: c}}
		cancelled := failed
		cancelled.Kind = frame.KindCancelled
		require.Equal(t, failed.Validate() == nil || cancelled.Validate() == nil, KnownCode(c), "code %d", i)
		if KnownCode(c) {
			known++
		}
	}
	require.Equal(t, 6, known)
}
