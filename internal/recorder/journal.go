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
	// defaultJournalQueueBytes bounds their bytes (eventBytes).
	defaultJournalQueueBytes = 64 << 20
	// defaultDrainTimeout bounds Close's wait for the journal writers
	// when its context has no deadline.
	defaultDrainTimeout = 10 * time.Second
	// eventOverhead is what an event costs in the queue beside its
	// strings and content: the Event (280 bytes) and its Content.
	eventOverhead = 256
	// endReserve is the room held for the end of every call whose start
	// a journal admitted: an end without its value is eventOverhead, its
	// ids and an error message of at most 2,048 characters (8 KiB of
	// UTF-8), which leaves room for ids of a few KiB.
	endReserve = 12 << 10
	// boundaryShare: 1/boundaryShare of a journal queue's bounds is kept
	// for calls' starts and ends, which middle events cannot take, so that
	// a stream of chunks filling the queue leaves room for the calls that
	// begin meanwhile.
	boundaryShare = 4
	// maxBatchBytes cuts a batch before the event that would take it past
	// this size (a batch has at least one event), so that a send of large
	// events is not one huge request.
	maxBatchBytes = 8 << 20
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

func journalQueue(j *calllog.Journal) int64 {
	if j.Queue > 0 {
		return int64(j.Queue)
	}
	return defaultJournalQueue
}

func journalQueueBytes(j *calllog.Journal) int64 {
	if j.QueueBytes > 0 {
		return j.QueueBytes
	}
	return defaultJournalQueueBytes
}

// eventBytes is what e costs in a journal queue: eventOverhead, its
// strings and its content. It depends only on e, so the room an event
// took is given back by computing it again.
func eventBytes(e *calllog.Event) int64 {
	n := eventOverhead + len(e.Tree) + len(e.Writer) + len(e.Call) + len(e.Parent) + len(e.Tool) +
		len(e.ToolVersion) + len(e.Child) + len(e.Refused) + len(e.Fragment)
	if e.Payload != nil {
		n += len(e.Payload.Value)
	}
	if m := e.Media; m != nil {
		n += len(m.Data) + len(m.BlobID) + len(m.SHA256) + len(m.MediaType)
	}
	if e.Error != nil {
		n += len(e.Error.Message)
	}
	return int64(n)
}

// withoutValue returns e with its payload's value left out (marked
// ValueDropped), or e itself and false when it has none to leave out.
func withoutValue(e calllog.Event) (calllog.Event, bool) {
	if e.Payload == nil || e.Payload.Value == nil {
		return e, false
	}
	c := *e.Payload
	c.Value, c.ValueDropped = nil, true
	e.Payload = &c
	return e, true
}

// journalBudget is the room the journal queues of all a recorder's trees
// share: the events queued and not yet kept, plus one event and
// endReserve bytes held for the end of every call whose start was
// admitted and whose end was not yet queued. Both stay within the
// journal's Queue and QueueBytes.
type journalBudget struct {
	mu     sync.Mutex // guards the fields below; taken inside a writer's mu, never the other way
	events int64
	bytes  int64
}

// take takes room for n events of size bytes if it fits: in the whole
// queue for a boundary event, in all but its last quarter (boundaryShare)
// for a middle one.
func (b *journalBudget) take(j *calllog.Journal, n, bytes int64, boundary bool) bool {
	maxN, maxB := journalQueue(j), journalQueueBytes(j)
	if !boundary {
		maxN -= maxN / boundaryShare
		maxB -= maxB / boundaryShare
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.events+n > maxN || b.bytes+bytes > maxB {
		return false
	}
	b.events += n
	b.bytes += bytes
	return true
}

// useHeld turns the room held for an end into room for the end itself,
// of size bytes, if it fits the byte bound (the event count does not
// change: the held event becomes the queued one); force makes it so
// whether or not it fits (an end without its value, which endReserve
// covers).
func (b *journalBudget) useHeld(j *calllog.Journal, bytes int64, force bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !force && b.bytes-endReserve+bytes > journalQueueBytes(j) {
		return false
	}
	b.bytes += bytes - endReserve
	return true
}

// give returns room.
func (b *journalBudget) give(n, bytes int64) {
	b.mu.Lock()
	b.events -= n
	b.bytes -= bytes
	b.mu.Unlock()
}

// used returns the room taken (for tests).
func (b *journalBudget) used() (events, bytes int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.events, b.bytes
}

// A Record's journal state (Record.jstate).
const (
	jNone     uint8 = iota // no start seen yet
	jAdmitted              // its start was queued: room is held for its end
	jDropped               // dropped whole: none of its events, nor its steps', are queued
	jEnded                 // its end was queued (or dropped after a stop)
)

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
	// queues together are bounded by Journal.Queue and QueueBytes
	// (Recorder.budget; overflow: drop the middle events, keep every
	// admitted call's boundaries, see Journal.QueueBytes).
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
	settle bool // a JournalError.Kept wait: only success or a stop answers it
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

// add queues e, an event of rec. Called with the tree's lock held, in Seq
// order: rec.jstate is guarded by that lock.
func (w *journalWriter) add(e calllog.Event, rec *Record) {
	w.mu.Lock()
	defer w.signal()
	defer w.mu.Unlock()
	b := &w.r.budget
	end := e.Kind.IsEnd()
	if w.stopErr != nil {
		if end && rec.jstate == jAdmitted {
			b.give(1, endReserve) // the room held for it
		}
		w.r.lost.journalEvents.Add(1)
		if end {
			rec.jstate = jEnded
		} else if rec.jstate == jNone {
			rec.jstate = jDropped
		}
		return
	}
	switch {
	case e.Kind == calllog.KindStarted:
		if p := rec.parent; p != nil && p.jstate == jDropped {
			rec.jstate = jDropped
			w.droppedLocked(e.Seq)
			return
		}
		if !b.take(w.j, 2, eventBytes(&e)+endReserve, true) {
			lean, ok := withoutValue(e)
			if !ok || !b.take(w.j, 2, eventBytes(&lean)+endReserve, true) {
				rec.jstate = jDropped
				w.droppedLocked(e.Seq)
				return
			}
			e = lean
			w.r.lost.journalValues.Add(1)
		}
		rec.jstate = jAdmitted
	case end:
		switch rec.jstate {
		case jDropped:
			w.droppedLocked(e.Seq)
			return
		case jAdmitted: // kept, in the room held for it
			if !b.useHeld(w.j, eventBytes(&e), false) {
				if lean, ok := withoutValue(e); ok {
					e = lean
					w.r.lost.journalValues.Add(1)
				}
				b.useHeld(w.j, eventBytes(&e), true)
			}
		default: // an end without a start queued: cannot happen
			w.droppedLocked(e.Seq)
			return
		}
		rec.jstate = jEnded
	default:
		if rec.jstate != jAdmitted || !b.take(w.j, 1, eventBytes(&e), false) {
			w.droppedLocked(e.Seq)
			return
		}
	}
	w.queue = append(w.queue, e)
}

// droppedLocked counts the event numbered seq as dropped by overflow.
func (w *journalWriter) droppedLocked(seq uint64) {
	w.r.lost.journalEvents.Add(1)
	if w.firstLost == 0 {
		w.firstLost = seq
	}
	w.failWaitersLocked(calllog.ErrJournalOverflow, false)
	if !w.warned {
		w.warned = true
		w.r.logger.Warn("calllog: journal queue full; events dropped, every call's start and end kept", "tree_id", w.tree,
			"queue", journalQueue(w.j), "queue_bytes", journalQueueBytes(w.j))
	}
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
		n, size := 0, int64(0)
		for n < min(len(w.queue), journalBatch(w.j)) {
			eb := eventBytes(&w.queue[n])
			if n > 0 && size+eb > maxBatchBytes {
				break
			}
			n, size = n+1, size+eb
		}
		batch := slices.Clone(w.queue[:n])
		w.mu.Unlock()

		err := w.send(batch)
		if err != nil {
			w.r.lost.journalSendErrors.Add(1)
		}

		w.mu.Lock()
		switch {
		case err == nil:
			w.r.budget.give(int64(len(batch)), size)
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
	var size int64
	for i := range w.queue {
		size += eventBytes(&w.queue[i])
	}
	w.r.budget.give(int64(len(w.queue)), size)
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
		w.failWaitersLocked(ErrNoAnswer, false)
		w.mu.Unlock()
	})
	err := w.attempt(ctx, batch)
	if !late.Stop() {
		<-fired
		if err != nil && !stopsWriter(err) {
			return errors.Join(ErrNoAnswer, err)
		}
	}
	return err
}

// firstBatchKeeper is a store that claims a new tree and keeps its first
// batch in one step (calllog.EventStore's optional KeepNew).
type firstBatchKeeper interface {
	KeepNew(ctx context.Context, tree, writer string, events []calllog.Event) (calllog.Claim, error)
}

func (w *journalWriter) attempt(ctx context.Context, batch []calllog.Event) error {
	if nk, ok := w.j.Store.(firstBatchKeeper); ok && !w.claimed {
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
