package protocol

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMillis(t *testing.T) {
	for ms, want := range map[int64]time.Duration{
		-5:            0,
		0:             0,
		1:             time.Millisecond,
		1500:          1500 * time.Millisecond,
		9_223_372_036: 9_223_372_036 * time.Millisecond,
		// Too large for a Duration in nanoseconds: saturated, not wrapped.
		10_000_000_000_000: maxMillis,
		math.MaxInt64:      maxMillis,
	} {
		require.Equal(t, want, Millis(ms), "Millis(%d)", ms)
	}
	sum := maxMillis
	sum += maxMillis
	require.Positive(t, sum, "two of them overflow")
}
