package recorder

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/skulkrt/skulk/calllog"
)

// ObserverQueue is how many events may wait for one observer (documented
// at calllog.Observer), counting one held for the end of every call whose
// start it was given and whose end it was not yet. An observer further
// behind loses middle events that do not fit in three quarters of it
// (drop newest) and sees the loss: the next event it is given has an
// After it was not given. It keeps every boundary: a start is queued with
// room for its end, or dropped with every event of its call and of the
// calls made inside it; the end of a call whose start was queued always
// is.
const ObserverQueue = 10_000

// observerMiddle is the part of ObserverQueue middle events may fill; the
// rest is for starts and ends.
const observerMiddle = ObserverQueue - ObserverQueue/4

// excludeKey marks a context whose calls must not be given to some
// observers: its value is a []*observerRunner, never modified once set.
type excludeKey struct{}

// kindFilter is an observer that wants only some kinds of event
// (calllog.Observer's optional WantsKind).
type kindFilter interface {
	WantsKind(k calllog.Kind) bool
}

func excludedBy(ctx context.Context) []*observerRunner {
	ex, _ := ctx.Value(excludeKey{}).([]*observerRunner)
	return ex
}

type delivery struct {
	ev      calllog.Event
	exclude []*observerRunner // of the call the event belongs to
}

// observerRunner feeds one observer from its own goroutine.
type observerRunner struct {
	r    *Recorder
	obs  calllog.Observer
	name string
	// kinds has bit k set for each Kind the observer is given (all but
	// those its WantsKind refuses); read-only once made.
	kinds uint32
	// holdsEnds: the observer is given starts and every end a live call
	// has (done, failed, cancelled), so its queue holds room for the end
	// of each start it queued; read-only once made. Without it nothing is
	// held: an end it is not given would never give its room back.
	holdsEnds bool

	// wake has room for one signal: a pending wake-up is enough.
	wake chan struct{}
	// done is closed when the goroutine has returned.
	done chan struct{}
	dead atomic.Bool // failed or panicked: given nothing more

	mu sync.Mutex // guards the fields below
	// queue holds what waits, at most ObserverQueue minus the batch being
	// delivered and the room held for ends (backlog counts the queue and
	// the batch); overflow: see ObserverQueue (admitLocked).
	queue   []delivery
	spare   []delivery
	backlog int
	// reserved counts the ends room is held for: calls whose start was
	// queued and whose end was not yet (only when holdsEnds).
	// backlog+reserved stays within ObserverQueue.
	reserved int
	// dropped holds the calls whose start did not fit: their events, and
	// their steps', are dropped until their end. Touched only on overflow.
	dropped   map[*Record]struct{}
	accepted  uint64
	delivered uint64
	closed    bool // no more input: return once the queue is empty
	warnedLag bool
	waiters   []drainWaiter
}

type drainWaiter struct {
	target uint64
	ch     chan struct{}
}

func newObserverRunner(r *Recorder, obs calllog.Observer, name string) *observerRunner {
	o := &observerRunner{r: r, obs: obs, name: name, kinds: ^uint32(0), wake: make(chan struct{}, 1), done: make(chan struct{})}
	if f, ok := obs.(kindFilter); ok {
		o.kinds = 0
		for k := calllog.KindStarted; k <= calllog.KindUnknown; k++ {
			if f.WantsKind(k) {
				o.kinds |= 1 << k
			}
		}
	}
	o.holdsEnds = o.wants(calllog.KindStarted) && o.wants(calllog.KindCompleted) && o.wants(calllog.KindFailed) && o.wants(calllog.KindCancelled)
	return o
}

// wants reports whether the observer is given events of kind k.
func (o *observerRunner) wants(k calllog.Kind) bool { return o.kinds&(1<<k) != 0 }

// offer queues e, an event of rec, without blocking. Called with the
// tree's lock held, so the events of one tree are queued in order.
func (o *observerRunner) offer(e calllog.Event, rec *Record, exclude []*observerRunner) {
	if o.dead.Load() {
		o.r.lost.observerEvents.Add(1)
		return
	}
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return
	}
	if !o.admitLocked(e.Kind, rec) {
		o.r.lost.observerEvents.Add(1)
		warn := !o.warnedLag
		o.warnedLag = true
		o.mu.Unlock()
		if warn {
			o.r.logger.Warn("calllog: observer fell behind; events that do not fit its queue are dropped, every call's start and end kept",
				"observer", o.name, "queue", ObserverQueue)
		}
		return
	}
	o.queue = append(o.queue, delivery{ev: e, exclude: exclude})
	o.backlog++
	o.accepted++
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// admitLocked decides whether an event of kind k of rec is queued: every
// boundary whose room is held, middle events within observerMiddle.
func (o *observerRunner) admitLocked(k calllog.Kind, rec *Record) bool {
	if !o.holdsEnds { // no room held: starts and ends are kept while they fit
		if k == calllog.KindStarted || k.IsEnd() {
			return o.backlog < ObserverQueue
		}
		return o.backlog < observerMiddle
	}
	if len(o.dropped) > 0 {
		if _, ok := o.dropped[rec]; ok {
			if k.IsEnd() {
				delete(o.dropped, rec)
			}
			return false
		}
	}
	switch {
	case k == calllog.KindStarted:
		if p := rec.parent; p != nil && len(o.dropped) > 0 {
			if _, ok := o.dropped[p]; ok {
				o.dropped[rec] = struct{}{}
				return false
			}
		}
		if o.backlog+o.reserved+2 > ObserverQueue {
			if o.dropped == nil {
				o.dropped = map[*Record]struct{}{}
			}
			o.dropped[rec] = struct{}{}
			return false
		}
		o.reserved++
		return true
	case k.IsEnd():
		if o.reserved > 0 { // its room: every end of a call whose start was queued
			o.reserved--
			return true
		}
		return o.backlog < ObserverQueue // a call that began before the observer did
	}
	return o.backlog+o.reserved < observerMiddle
}

// close stops the input; the goroutine returns once the queue is empty.
func (o *observerRunner) close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// run is the observer's goroutine. Stopped by close (after the queue is
// delivered) or by the recorder's context (queue discarded).
func (o *observerRunner) run() {
	defer close(o.done)
	defer o.r.forgetRunner(o)
	selfCtx := context.WithValue(o.r.ctx, excludeKey{}, []*observerRunner{o})
	for {
		o.mu.Lock()
		for len(o.queue) == 0 && !o.closed {
			o.mu.Unlock()
			select {
			case <-o.wake:
			case <-o.r.ctx.Done():
			}
			o.mu.Lock()
			if o.r.ctx.Err() != nil {
				o.closed = true
			}
		}
		if len(o.queue) == 0 {
			o.wakeWaitersLocked(true)
			o.mu.Unlock()
			return
		}
		batch := o.queue
		o.queue = o.spare[:0]
		o.mu.Unlock()
		for i := range batch {
			if !o.dead.Load() && o.r.ctx.Err() == nil {
				ctx := selfCtx
				if ex := batch[i].exclude; len(ex) > 0 {
					ctx = context.WithValue(o.r.ctx, excludeKey{}, append(slices.Clone(ex), o))
				}
				o.deliver(ctx, batch[i].ev)
			} else {
				o.r.lost.observerEvents.Add(1) // failed, or discarded by Close
			}
			batch[i] = delivery{}
			o.mu.Lock()
			o.backlog--
			o.delivered++
			o.wakeWaitersLocked(false)
			o.mu.Unlock()
		}
		o.mu.Lock()
		o.spare = batch[:0]
		o.mu.Unlock()
	}
}

func (o *observerRunner) deliver(ctx context.Context, e calllog.Event) {
	defer func() {
		if p := recover(); p != nil {
			o.fail(slog.String("panic", fmt.Sprint(p)))
		}
	}()
	if err := o.obs.Observe(ctx, e); err != nil {
		o.fail(slog.String("error", err.Error()))
	}
}

// fail marks the observer dead and warns once.
func (o *observerRunner) fail(why slog.Attr) {
	if o.dead.Swap(true) {
		return
	}
	o.r.lost.observersFailed.Add(1)
	o.r.logger.Warn("calllog: observer failed; it is given no more events", "observer", o.name, why)
}

func (o *observerRunner) wakeWaitersLocked(all bool) {
	kept := o.waiters[:0]
	for _, w := range o.waiters {
		if all || o.delivered >= w.target {
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	o.waiters = kept
}

// drained returns a channel closed once everything accepted so far has been
// delivered (or discarded, for a dead observer).
func (o *observerRunner) drained() <-chan struct{} {
	ch := make(chan struct{})
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.delivered >= o.accepted {
		close(ch)
		return ch
	}
	select {
	case <-o.done:
		close(ch)
		return ch
	default:
	}
	o.waiters = append(o.waiters, drainWaiter{target: o.accepted, ch: ch})
	return ch
}
