package turns

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestGateFirstComeFirstServed: with every slot taken, waiters get the
// slots in the order they came, each from one leave.
func TestGateFirstComeFirstServed(t *testing.T) {
	g := New(1)
	require.False(t, g.Enter(make(chan struct{}, 1)), "a free slot is taken at once")
	got := make(chan int, 3)
	for i := range 3 {
		wait := make(chan struct{}, 1)
		go func() { // ends once a leave hands it the slot
			g.Enter(wait)
			got <- i
		}()
		require.Eventually(t, func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			return len(g.queue)-g.head == i+1
		}, 5*time.Second, time.Millisecond)
	}
	for i := range 3 {
		g.Leave()
		require.Equal(t, i, <-got)
	}
	g.Leave()
	require.Equal(t, 1, g.free)
}
