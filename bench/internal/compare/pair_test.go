package compare

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPair(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := Pair(ctx, PairOptions{Children: []string{bins.Skulk}, Dir: t.TempDir()}); err == nil {
		assert.Fail(t, "Pair of one child: no error")
	}
	res, err := Pair(ctx, PairOptions{Children: []string{bins.Skulk, bins.Skulk}, Dir: t.TempDir(), Rounds: 2, Block: 20})
	require.NoError(t, err)
	require.EqualValuesf(t, 4, len(res), "got %d results, want 4 (two children, two shapes)", len(res))
	for i, r := range res {
		if want := []string{"call", "unary"}[i%2]; r.Shape != want || r.Child != bins.Skulk {
			assert.Fail(t, fmt.Sprintf("result %d is %s of %s, want %s of %s", i, r.Shape, r.Child, want, bins.Skulk))
		}
		if r.Calls != 2*18 {
			assert.Fail(t, fmt.Sprintf("%s: %d calls timed, want %d (two blocks of 20, 2 warming up)", r.Shape, r.Calls, 2*18))
		}
		assert.Falsef(t, r.P25 <= 0 || r.P25 > r.P50 || r.P50 > r.P75, "%s: quartiles %v, %v, %v out of order", r.Shape, r.P25, r.P50, r.P75)
	}
	if _, err := Pair(ctx, PairOptions{Children: []string{bins.Skulk, bins.SkulkDemo}, Dir: t.TempDir(), Rounds: 1, Block: 1}); err == nil {
		assert.Fail(t, "Pair with a child that has no unary tool: no error")
	}
}
