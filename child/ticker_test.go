package child

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTickerArmedWhileUsed: a ticker ticks one period after a use, again
// while its function reports work, and then not at all; a use that ends
// before the tick (done) leaves nothing armed, and a use that comes while
// the function looks arms one more tick; after stop it never ticks.
func TestTickerArmedWhileUsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ticks, busyLeft atomic.Int64
		var k *ticker
		var useInTick atomic.Bool
		k = newTicker(10*time.Millisecond, func() bool {
			ticks.Add(1)
			if useInTick.CompareAndSwap(true, false) {
				k.use() // a use the look may have missed
			}
			return busyLeft.Add(-1) >= 0
		})
		defer k.stop()
		synctest.Wait()
		require.Zero(t, ticks.Load(), "ticked before any use")

		k.use()
		k.use() // armed already: the same tick
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		require.Equal(t, int64(1), ticks.Load())
		// That tick found no work and no use while it looked: the last,
		// though its users have not said done.
		time.Sleep(time.Second)
		require.Equal(t, int64(1), ticks.Load())
		k.done()
		k.done()

		busyLeft.Store(3) // work reported by three ticks keeps it going
		k.use()
		time.Sleep(time.Second)
		require.Equal(t, int64(1+3+1), ticks.Load(), "three ticks that report work, then one that finds none")
		k.done()

		// A use that is done before its tick leaves nothing to tick.
		k.use()
		time.Sleep(5 * time.Millisecond)
		k.done()
		time.Sleep(time.Second)
		require.Equal(t, int64(5), ticks.Load(), "ticked after the last use was done")

		// A use while the function looks: one more tick.
		useInTick.Store(true)
		k.use()
		time.Sleep(time.Second)
		require.Equal(t, int64(7), ticks.Load(), "the tick that saw a use while it looked, then one more")
		k.done()
		k.done()
	})
}

// TestTickerStop: stop stops an armed ticker before it ticks, waits for a
// tick under way, and makes later uses do nothing.
func TestTickerStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ticks atomic.Int64
		k := newTicker(10*time.Millisecond, func() bool { ticks.Add(1); return true })
		k.use()
		k.stop()
		time.Sleep(time.Second)
		require.Zero(t, ticks.Load())
		k.use()
		time.Sleep(time.Second)
		require.Zero(t, ticks.Load(), "a use after stop armed the ticker")

		entered, leave := make(chan struct{}), make(chan struct{})
		k = newTicker(10*time.Millisecond, func() bool {
			close(entered)
			<-leave
			ticks.Add(1)
			return true
		})
		k.use()
		<-entered
		stopped := make(chan struct{})
		go func() { k.stop(); close(stopped) }() // returns once the tick has
		synctest.Wait()
		select {
		case <-stopped:
			require.FailNow(t, "stop returned during a tick")
		default:
		}
		close(leave)
		<-stopped
		require.Equal(t, int64(1), ticks.Load())
		time.Sleep(time.Second)
		require.Equal(t, int64(1), ticks.Load(), "the tick under way armed the ticker after stop")
	})
}
