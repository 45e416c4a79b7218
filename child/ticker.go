package child

import (
	"sync"
	"time"
)

// ticker calls fn every period while it has users, on one timer: use
// counts a user in and arms the timer when it is not armed; done counts
// one out and, when none is left, stops the timer; a tick arms it again
// when fn reports work left (busy) or a use came while fn was looking.
// With no user nothing is armed, so a child whose calls have all returned
// has no timer to wake for (not even one tick after its last call), and a
// burst of overlapping uses costs one arming, not one each.
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
	users   int            // uses not done yet; guarded by mu
	used    bool           // use was called since the running tick began; guarded by mu
	stopped bool           // guarded by mu
	wg      sync.WaitGroup // the armed timer and a tick under way; stop waits for them
}

func newTicker(period time.Duration, fn func() (busy bool)) *ticker {
	return &ticker{period: period, fn: fn}
}

// use says the ticker is needed until the matching done, and arms it if
// it is not armed. After stop it does nothing but count.
func (k *ticker) use() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.users++
	k.used = true
	if !k.armed && !k.stopped {
		k.armLocked()
	}
}

// done ends one use. When it was the last, the armed timer is stopped: a
// tick would find nothing to look at. A tick already firing decides for
// itself, by what fn finds.
func (k *ticker) done() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.users--
	if k.users == 0 && k.armed && k.t.Stop() {
		k.armed = false
		k.wg.Done()
	}
}

// armLocked arms the timer for one period from now; mu is held.
func (k *ticker) armLocked() {
	k.armed = true
	k.wg.Add(1) // done by tick, or by stop or done stopping the timer
	if k.t == nil {
		k.t = time.AfterFunc(k.period, k.tick)
	} else {
		k.t.Reset(k.period)
	}
}

// tick runs fn, then arms the timer again if fn found work, or a use came
// while fn was looking (fn may have missed it).
func (k *ticker) tick() {
	defer k.wg.Done()
	k.mu.Lock()
	k.used = false
	k.mu.Unlock()
	busy := k.fn()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.armed = false
	if k.stopped || !busy && !k.used {
		return
	}
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
