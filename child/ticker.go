package child

import (
	"sync"
	"time"
)

// ticker calls fn every period for as long as it is in use, on one timer:
// use arms the timer when it is not armed, and a tick arms it again when
// use was called since the tick before or fn reports work left (busy).
// Between bursts of use nothing is armed, so an idle child has no timer to
// wake for, and a burst of uses costs one arming, not one each.
//
// The server owns its tickers: it makes them with newTicker and stops them
// with stop, which waits for a tick under way. fn runs on the timer's own
// goroutine, one tick at a time.
type ticker struct {
	period time.Duration
	fn     func() (busy bool)

	mu      sync.Mutex
	t       *time.Timer    // made on first use; guarded by mu
	armed   bool           // guarded by mu
	used    bool           // use was called since the last tick; guarded by mu
	stopped bool           // guarded by mu
	wg      sync.WaitGroup // the armed timer and a tick under way; stop waits for them
}

func newTicker(period time.Duration, fn func() (busy bool)) *ticker {
	return &ticker{period: period, fn: fn}
}

// use says the ticker is needed, and arms it if it is not armed. After
// stop it does nothing.
func (k *ticker) use() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.used = true
	if !k.armed && !k.stopped {
		k.armLocked()
	}
}

// armLocked arms the timer for one period from now; mu is held.
func (k *ticker) armLocked() {
	k.armed = true
	k.wg.Add(1) // done by tick, or by stop stopping the timer
	if k.t == nil {
		k.t = time.AfterFunc(k.period, k.tick)
	} else {
		k.t.Reset(k.period)
	}
}

// tick runs fn, then arms the timer again if the ticker is still in use.
func (k *ticker) tick() {
	defer k.wg.Done()
	busy := k.fn()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.armed = false
	if k.stopped || !busy && !k.used {
		return
	}
	k.used = false
	k.armLocked()
}

// stop stops the ticker for good and waits for a tick under way.
func (k *ticker) stop() {
	k.mu.Lock()
	k.stopped = true
	if k.armed && k.t.Stop() {
		k.armed = false
		k.wg.Done()
	}
	k.mu.Unlock()
	k.wg.Wait()
}
