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

// TestGateQuit: a waiter that quits leaves the line at once, the others
// keep their order, and a waiter handed a slot before it quit holds it.
func TestGateQuit(t *testing.T) {
	g := New(1)
	require.True(t, g.Join(make(chan struct{}, 1)), "a free slot is taken at once")
	a, b, c := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}, 1)
	require.False(t, g.Join(a))
	require.False(t, g.Join(b))
	require.False(t, g.Join(c))
	require.True(t, g.Waiting())

	require.False(t, g.Quit(b), "b was in line: it holds nothing")
	g.Leave()
	require.Len(t, a, 1, "the slot goes to the oldest waiter")
	require.Empty(t, c)
	<-a
	g.Leave()
	require.Len(t, c, 1, "b quit: the slot goes to c")
	// c was handed the slot before it quit: it holds it, and wait is empty.
	require.True(t, g.Quit(c))
	require.Empty(t, c)
	require.False(t, g.Waiting())
	g.Leave()
	require.Equal(t, 1, g.free)
	require.True(t, g.Join(b), "the freed slot is taken at once")

	// Quitting leaves nothing behind: the line does not grow with joins
	// and quits while every slot is held.
	for range 1000 {
		require.False(t, g.Join(a))
		require.False(t, g.Quit(a))
	}
	require.Zero(t, len(g.queue)-g.head)
}
