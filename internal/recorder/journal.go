package recorder

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/skulkrt/skulk/calllog"
)

// The defaults of a journal's zero fields (documented at calllog.Journal).
const (
	// defaultJournalTimeout is how long a store send may go unanswered
	// before it counts as no answer.
	defaultJournalTimeout = 30 * time.Second
	// defaultJournalBatch is the most events one send carries.
	defaultJournalBatch = 512
	// defaultJournalQueue bounds the events waiting to be sent.
	defaultJournalQueue = 65_536
	// maxRetryDelay bounds the wait between two sends of a batch after an
	// error.
	maxRetryDelay = time.Second
)

func journalTimeout(j *calllog.Journal) time.Duration {
	if j.Timeout > 0 {
		return j.Timeout
	}
	return defaultJournalTimeout
}

func journalBatch(j *calllog.Journal) int {
	if j.Batch > 0 {
		return j.Batch
	}
	return defaultJournalBatch
}

// defaultJournalQueueBytes bounds the content of the events waiting to
// be sent when calllog.Journal.QueueBytes is 0.
const defaultJournalQueueBytes = 64 << 20

func journalQueueBytes(j *calllog.Journal) int64 {
	if j.QueueBytes > 0 {
		return int64(j.QueueBytes)
	}
	return defaultJournalQueueBytes
}

// keptBytes is what e counts against Journal.QueueBytes: the content it
// keeps.
func keptBytes(e *calllog.Event) int64 {
	n := int64(len(e.Fragment))
	if e.Payload != nil {
		n += int64(len(e.Payload.Value))
	}
	if e.Media != nil {
		n += int64(len(e.Media.Data))
	}
	return n
}

func journalQueue(j *calllog.Journal) int {
	if j.Queue > 0 {
		return j.Queue
	}
	return defaultJournalQueue
}

// journalWriter sends one tree's events to the store.
type journalWriter struct {
	r    *Recorder
	j    *calllog.Journal
	tree string
	// wake has room for one signal: a pending wake-up is enough.
	wake chan struct{}
	// done is closed when the writer goroutine has returned.
	done chan struct{}

	// claim is used only by the attempt in flight (one at a time).
	claim   calllog.Claim
	claimed bool

	mu sync.Mutex // guards the fields below
	// queue holds the events not yet kept, in Seq order; all the trees'
	// queues together are bounded by j.queue() (Recorder.journalQueued;
	// overflow: drop, see Journal.Queue).
	queue     []calllog.Event
	kept      uint64 // every event ≤ kept was kept (or lost, see firstLost)
	firstLost uint64 // first Seq dropped by overflow; 0 = none
	stopErr   error  // the writer stopped: why
	final     bool   // the tree ended: return once the queue is empty
	waiters   []journalWaiter
	warned    bool
}

type journalWaiter struct {
	seq    uint64
	settle bool // a Settle: only success or a stop answers it
	ch     chan error
}

func newJournalWriter(r *Recorder, j *calllog.Journal, tree string) *journalWriter {
	return &journalWriter{r: r, j: j, tree: tree, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

func (w *journalWriter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// add queues e. Called with the tree's lock held, in Seq order.
func (w *journalWriter) add(e calllog.Event) {
	w.mu.Lock()
	switch {
	case w.stopErr != nil:
		w.r.lost.journalEvents.Add(1)
	case w.r.journalQueued.Load() >= int64(journalQueue(w.j)),
		w.r.journalQueued.Load() > 0 && w.r.journalBytes.Load()+keptBytes(&e) > journalQueueBytes(w.j):
		w.r.lost.journalEvents.Add(1)
		if w.firstLost == 0 {
			w.firstLost = e.Seq
		}
		w.failWaitersLocked(calllog.ErrJournalOverflow, false)
		if !w.warned {
			w.warned = true
			w.r.logger.Warn("calllog: journal queue full; events dropped", "tree_id", w.tree, "queue", journalQueue(w.j))
		}
	default:
		w.queue = append(w.queue, e)
		w.r.journalQueued.Add(1)
		w.r.journalBytes.Add(keptBytes(&e))
	}
	w.mu.Unlock()
	w.signal()
}

// finish tells the writer the tree has ended.
func (w *journalWriter) finish() {
	w.mu.Lock()
	w.final = true
	w.mu.Unlock()
	w.signal()
}

// wait waits until the event numbered seq is kept. A barrier (settle false)
// also fails when a send fails or goes unanswered; a settle waits through
// those.
func (w *journalWriter) wait(ctx context.Context, seq uint64, settle bool) error {
	w.mu.Lock()
	if err := w.answerLocked(seq); err != nil || w.kept >= seq {
		w.mu.Unlock()
		return err
	}
	ch := make(chan error, 1)
	w.waiters = append(w.waiters, journalWaiter{seq: seq, settle: settle, ch: ch})
	w.mu.Unlock()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		w.mu.Lock()
		w.waiters = slices.DeleteFunc(w.waiters, func(x journalWaiter) bool { return x.ch == ch })
		w.mu.Unlock()
		select {
		case err := <-ch: // answered meanwhile
			return err
		default:
			return ctx.Err()
		}
	}
}

// answerLocked returns the final error for seq, if there is one already.
func (w *journalWriter) answerLocked(seq uint64) error {
	if w.firstLost != 0 && seq >= w.firstLost {
		return calllog.ErrJournalOverflow
	}
	if w.kept >= seq {
		return nil
	}
	return w.stopErr
}

func (w *journalWriter) keptLocked(through uint64) {
	w.kept = through
	w.waiters = slices.DeleteFunc(w.waiters, func(x journalWaiter) bool {
		if x.seq <= through {
			x.ch <- w.answerLocked(x.seq)
			return true
		}
		return false
	})
}

// failWaitersLocked answers the waiting barriers (and settles too, when
// final) with err.
func (w *journalWriter) failWaitersLocked(err error, final bool) {
	w.waiters = slices.DeleteFunc(w.waiters, func(x journalWaiter) bool {
		if final || !x.settle {
			x.ch <- err
			return true
		}
		return false
	})
}

func stopsWriter(err error) bool {
	return errors.Is(err, calllog.ErrStoreUnusable) || errors.Is(err, calllog.ErrFenced) || errors.Is(err, calllog.ErrTreeExists)
}

// run is the tree's writer goroutine. Stopped when the tree has ended and
// its queue is kept, when the store is unusable, or by the recorder's
// context (Close).
func (w *journalWriter) run() {
	defer w.r.wg.Done()
	defer close(w.done)
	defer func() {
		w.r.mu.Lock()
		delete(w.r.writers, w)
		w.r.mu.Unlock()
	}()
	delay := 10 * time.Millisecond
	for {
		w.mu.Lock()
		for len(w.queue) == 0 && !w.final && w.r.ctx.Err() == nil {
			w.mu.Unlock()
			select {
			case <-w.wake:
			case <-w.r.ctx.Done():
			}
			w.mu.Lock()
		}
		if w.r.ctx.Err() != nil {
			w.stopLocked(ErrClosed)
			w.mu.Unlock()
			return
		}
		if len(w.queue) == 0 { // final and all kept
			w.stopLocked(ErrClosed)
			w.mu.Unlock()
			return
		}
		batch := slices.Clone(w.queue[:min(len(w.queue), journalBatch(w.j))])
		w.mu.Unlock()

		err := w.send(batch)
		if err != nil {
			w.r.lost.journalSendErrors.Add(1)
		}

		w.mu.Lock()
		switch {
		case err == nil:
			w.r.journalQueued.Add(-int64(len(batch)))
			w.r.journalBytes.Add(-batchBytes(batch))
			clear(w.queue[:len(batch)])
			w.queue = w.queue[len(batch):]
			if len(w.queue) == 0 {
				w.queue = nil // let the backing array go; append makes a new one
			}
			w.keptLocked(batch[len(batch)-1].Seq)
			delay = 10 * time.Millisecond
		case stopsWriter(err) || w.r.ctx.Err() != nil:
			if w.r.ctx.Err() != nil {
				err = ErrClosed
			}
			w.stopLocked(err)
			w.mu.Unlock()
			if w.r.ctx.Err() == nil {
				w.r.logger.Warn("calllog: journal writer stopped", "tree_id", w.tree, "error", err.Error())
			}
			return
		case w.r.closing.Load():
			// Closing: what cannot be kept at once is given up.
			w.stopLocked(err)
			w.mu.Unlock()
			w.r.logger.Warn("calllog: journal writer stopped at close with events not kept", "tree_id", w.tree, "error", err.Error())
			return
		default:
			w.failWaitersLocked(err, false)
		}
		w.mu.Unlock()
		if err != nil {
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-w.r.ctx.Done():
				t.Stop()
			}
			delay = min(2*delay, maxRetryDelay)
		}
	}
}

func (w *journalWriter) stopLocked(err error) {
	if w.stopErr == nil {
		w.stopErr = err
	}
	w.r.journalQueued.Add(-int64(len(w.queue)))
	w.r.journalBytes.Add(-batchBytes(w.queue))
	w.r.lost.journalEvents.Add(uint64(len(w.queue)))
	clear(w.queue)
	w.queue = nil
	w.failWaitersLocked(w.stopErr, true)
}

// send makes one attempt at keeping batch, on the writer goroutine, so no
// other send can start beside it. Past the timeout a timer tells the
// barriers there is no answer while the attempt is still waited for; its
// context is done then too, so a store that honours it returns, and the
// batch is sent again.
func (w *journalWriter) send(batch []calllog.Event) error {
	ctx, cancel := context.WithTimeout(w.r.ctx, journalTimeout(w.j))
	defer cancel()
	fired := make(chan struct{})
	late := time.AfterFunc(journalTimeout(w.j), func() { // stopped by late.Stop, or waited for below
		defer close(fired)
		w.mu.Lock()
		w.failWaitersLocked(calllog.ErrNoAnswer, false)
		w.mu.Unlock()
	})
	err := w.attempt(ctx, batch)
	if !late.Stop() {
		<-fired
		if err != nil && !stopsWriter(err) {
			return errors.Join(calllog.ErrNoAnswer, err)
		}
	}
	return err
}

func (w *journalWriter) attempt(ctx context.Context, batch []calllog.Event) error {
	if nk, ok := w.j.Store.(calllog.NewTreeKeeper); ok && !w.claimed {
		c, err := nk.KeepNew(ctx, w.tree, w.r.writer, batch)
		if err != nil {
			return err
		}
		w.claim, w.claimed = c, true
		return nil
	}
	if !w.claimed {
		c, err := w.j.Store.Claim(ctx, w.tree, w.r.writer)
		if err != nil {
			return err
		}
		if c.Last != 0 && c.Last >= batch[0].Seq {
			return calllog.ErrTreeExists
		}
		w.claim, w.claimed = c, true
	}
	return w.j.Store.Keep(ctx, w.claim, batch)
}

// batchBytes is the sum of keptBytes over events.
func batchBytes(events []calllog.Event) int64 {
	var n int64
	for i := range events {
		n += keptBytes(&events[i])
	}
	return n
}
