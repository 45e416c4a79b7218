package calllog

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/skulkrt/skulk/frame"
)

// Journal defaults.
const (
	// DefaultJournalTimeout is how long a store send may go unanswered
	// before it counts as no answer.
	DefaultJournalTimeout = 30 * time.Second
	// DefaultJournalBatch is the most events one send carries.
	DefaultJournalBatch = 512
	// DefaultJournalQueue bounds the events waiting to be sent.
	DefaultJournalQueue = 65_536
	// maxRetryDelay bounds the wait between two sends of a batch after an
	// error.
	maxRetryDelay = time.Second
)

// Journal keeps every tree's log in a store. A recorder has at most one;
// each tree gets a writer goroutine of its own that sends batches in order,
// one send at a time.
//
// A best-effort journal (Required false) never makes a call wait. A
// required one makes a call wait at its start (Begin: not kept → the call
// is refused with ErrJournalStart and its invoke must not be written) and
// at its end (End: not confirmed → ErrJournalEnd with the outcome; Settle
// says later whether it was kept).
//
// A send the store has not answered within Timeout counts as no answer:
// the waiting calls are told, the send is waited for still, and it is sent
// again after it returns — never two sends of one batch at once. A store
// error matching ErrStoreUnusable, ErrFenced or ErrTreeExists stops the
// tree's writer; any other error is no answer and the batch is sent again.
//
// A Journal must not be changed once given to a recorder.
type Journal struct {
	// Store keeps the events; required.
	Store EventStore
	// Required makes calls wait for their start and end to be kept.
	Required bool
	// Timeout bounds one send; 0 means DefaultJournalTimeout.
	Timeout time.Duration
	// Batch is the most events one send carries; 0 means
	// DefaultJournalBatch.
	Batch int
	// Queue bounds the events waiting to be sent, all the recorder's trees
	// together; 0 means DefaultJournalQueue. Overflow drops the event (the
	// store shows the gap) and, for a required journal, fails every later
	// barrier of that tree with ErrJournalOverflow.
	Queue int
}

func (j *Journal) timeout() time.Duration {
	if j.Timeout > 0 {
		return j.Timeout
	}
	return DefaultJournalTimeout
}

func (j *Journal) batch() int {
	if j.Batch > 0 {
		return j.Batch
	}
	return DefaultJournalBatch
}

func (j *Journal) queue() int {
	if j.Queue > 0 {
		return j.Queue
	}
	return DefaultJournalQueue
}

// journalWriter sends one tree's events to the store.
type journalWriter struct {
	r    *Recorder
	j    *Journal
	tree string
	// wake has room for one signal: a pending wake-up is enough.
	wake chan struct{}
	// done is closed when the writer goroutine has returned.
	done chan struct{}

	// claim is used only by the attempt in flight (one at a time).
	claim   Claim
	claimed bool

	mu sync.Mutex // guards the fields below
	// queue holds the events not yet kept, in Seq order; all the trees'
	// queues together are bounded by j.queue() (Recorder.journalQueued;
	// overflow: drop, see Journal.Queue).
	queue     []Event
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

func newJournalWriter(r *Recorder, j *Journal, tree string) *journalWriter {
	return &journalWriter{r: r, j: j, tree: tree, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

func (w *journalWriter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// add queues e. Called with the tree's lock held, in Seq order.
func (w *journalWriter) add(e Event) {
	w.mu.Lock()
	switch {
	case w.stopErr != nil:
	case w.r.journalQueued.Load() >= int64(w.j.queue()):
		if w.firstLost == 0 {
			w.firstLost = e.Seq
		}
		w.failWaitersLocked(ErrJournalOverflow, false)
		if !w.warned {
			w.warned = true
			w.r.logger.Warn("calllog: journal queue full; events dropped", "tree", w.tree, "queue", w.j.queue())
		}
	default:
		w.queue = append(w.queue, e)
		w.r.journalQueued.Add(1)
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
		return ErrJournalOverflow
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
	return errors.Is(err, ErrStoreUnusable) || errors.Is(err, ErrFenced) || errors.Is(err, ErrTreeExists)
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
		batch := slices.Clone(w.queue[:min(len(w.queue), w.j.batch())])
		w.mu.Unlock()

		err := w.send(batch)

		w.mu.Lock()
		switch {
		case err == nil:
			w.r.journalQueued.Add(-int64(len(batch)))
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
				w.r.logger.Warn("calllog: journal writer stopped", "error", err.Error())
			}
			return
		case w.r.closing.Load():
			// Closing: what cannot be kept at once is given up.
			w.stopLocked(err)
			w.mu.Unlock()
			w.r.logger.Warn("calllog: journal writer stopped at close with events not kept", "tree", w.tree, "error", err.Error())
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
	clear(w.queue)
	w.queue = nil
	w.failWaitersLocked(w.stopErr, true)
}

// send makes one attempt at keeping batch, on the writer goroutine, so no
// other send can start beside it. Past the timeout a timer tells the
// barriers there is no answer while the attempt is still waited for; its
// context is done then too, so a store that honours it returns, and the
// batch is sent again.
func (w *journalWriter) send(batch []Event) error {
	ctx, cancel := context.WithTimeout(w.r.ctx, w.j.timeout())
	defer cancel()
	fired := make(chan struct{})
	late := time.AfterFunc(w.j.timeout(), func() { // stopped by late.Stop, or waited for below
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

func (w *journalWriter) attempt(ctx context.Context, batch []Event) error {
	if nk, ok := w.j.Store.(NewTreeKeeper); ok && !w.claimed {
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
			return ErrTreeExists
		}
		w.claim, w.claimed = c, true
	}
	return w.j.Store.Keep(ctx, w.claim, batch)
}

// Settle waits until the end of the call whose *JournalError err is was
// kept after all (for ErrJournalStart and ErrJournalPolicy: the end that
// records the refusal): nil when it was, the journal's reason when it
// can no longer be (the writer stopped, events were dropped), ctx.Err()
// when ctx is done first. An err that is not such an error gives itself
// back.
func Settle(ctx context.Context, err error) error {
	var je *JournalError
	if !errors.As(err, &je) || je.w == nil {
		return err
	}
	return je.w.wait(ctx, je.seq, true)
}

// TakeOver claims tree in the recorder's journal store for this recorder
// (a restarted host continuing a tree another writer left) and records the
// outcome it can prove of every call the log shows started and not ended:
// failed, synthetic, unreachable, children before parents, numbered after
// the last kept event. It returns the events it kept. The previous writer
// is fenced from then on. A tree the store has no event of is not claimed:
// ErrNoTree.
func (r *Recorder) TakeOver(ctx context.Context, tree string) ([]Event, error) {
	if r.journal == nil {
		return nil, ErrNoJournal
	}
	st := r.journal.Store
	if first, err := st.EventsAfter(ctx, tree, 0, 1); err != nil {
		return nil, err
	} else if len(first) == 0 {
		return nil, ErrNoTree
	}
	c, err := st.Claim(ctx, tree, r.writer)
	if err != nil {
		return nil, err
	}
	type open struct {
		ev    Event // the call's latest event
		depth int
	}
	calls := map[string]*open{}
	var order []string
	for after := uint64(0); ; {
		evs, err := st.EventsAfter(ctx, tree, after, 1024)
		if err != nil {
			return nil, err
		}
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			after = e.Seq
			if e.Kind.IsEnd() {
				delete(calls, e.Call)
				continue
			}
			o := calls[e.Call]
			if o == nil {
				o = &open{}
				if p := calls[e.Parent]; p != nil {
					o.depth = p.depth + 1
				}
				calls[e.Call] = o
				order = append(order, e.Call)
			}
			o.ev = e
		}
	}
	var opens []*open
	for i := len(order) - 1; i >= 0; i-- { // latest started first
		if o := calls[order[i]]; o != nil {
			opens = append(opens, o)
			delete(calls, order[i])
		}
	}
	slices.SortStableFunc(opens, func(a, b *open) int { return b.depth - a.depth })
	out := make([]Event, 0, len(opens))
	seq := c.Last
	now := time.Now()
	for _, o := range opens {
		seq++
		e := o.ev
		e.Kind, e.Writer, e.Seq, e.After, e.At = KindFailed, r.writer, seq, seq-1, now
		e.Child, e.FrameKind, e.FrameSeq, e.Payload, e.Media, e.Refused = "", 0, 0, nil, nil, ""
		e.Error = &ErrorInfo{Code: frame.CodeUnreachable, Message: "calllog: the tree's writer stopped before the call ended; taken over", Synthetic: true}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, nil
	}
	kctx, cancel := context.WithTimeout(ctx, r.journal.timeout())
	defer cancel()
	if err := st.Keep(kctx, c, out); err != nil {
		return nil, err
	}
	return out, nil
}
