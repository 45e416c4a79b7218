package calllog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/settle"
)

// Journal keeps every tree's log in a store: a host (host.Config.CallLog)
// has at most one, and each tree gets a writer goroutine of its own that
// sends batches in order, one send at a time.
//
// A best-effort journal (Required false) never makes a call wait. A
// required one makes a call wait at its start (not kept: the call is
// refused with ErrJournalStart and its invoke is never written) and at its
// end (not confirmed: ErrJournalEnd with the outcome, after the terminal;
// Settle says later whether it was kept).
//
// A send the store has not answered within Timeout counts as no answer:
// the waiting calls are told, the send is waited for still, and it is sent
// again after it returns — never two sends of one batch at once. A store
// error matching ErrStoreUnusable, ErrFenced or ErrTreeExists stops the
// tree's writer; any other error is no answer and the batch is sent again.
//
// A Journal must not be changed once given to a host.
type Journal struct {
	// Store keeps the events; required.
	Store EventStore
	// Required makes calls wait for their start and end to be kept.
	Required bool
	// Timeout bounds one send; 0 means 30 s.
	Timeout time.Duration
	// Batch is the most events one send carries; 0 means 512.
	Batch int
	// Queue bounds the events waiting to be sent, all the host's trees
	// together; 0 means 65,536. Overflow drops the event (the store shows
	// the gap) and, for a required journal, fails every later barrier of
	// that tree with ErrJournalOverflow.
	Queue int
	// QueueBytes bounds the content those events hold (payloads, media
	// data and argument fragments kept under ContentFull), all trees
	// together; 0 means 64 MiB. An event that does not fit is dropped as
	// for Queue, unless the queue is empty: one event is always taken,
	// whatever its size.
	QueueBytes int
}

// Settle waits until the end of the call whose *JournalError err is was
// kept after all (for ErrJournalStart and ErrJournalPolicy: the end that
// records the refusal): nil when it was, the journal's reason when it can
// no longer be (the writer stopped, events were dropped), ctx.Err() when
// ctx is done first. err may be the error a host returned (wrapping or
// joining the *JournalError) or the *JournalError itself; any other error
// gives itself back.
func Settle(ctx context.Context, err error) error {
	var je *JournalError
	if !errors.As(err, &je) || je.settle == nil {
		return err
	}
	return je.settle(ctx)
}

func init() {
	settle.Attach = func(err error, wait func(context.Context) error) {
		err.(*JournalError).settle = wait
	}
}

// takeOverTimeout bounds TakeOver's write of the outcomes it records.
const takeOverTimeout = 30 * time.Second

// TakeOver claims tree in store for writer (a restarted host continuing a
// tree another writer left; "" means a random 16-hex-digit name) and
// records the outcome it can prove of every call the log shows started and
// not ended: failed, synthetic, unreachable, children before parents,
// numbered after the last kept event. It returns the events it kept. The
// previous writer is fenced from then on (its Keep fails with ErrFenced),
// so nothing it still sends is interleaved. A tree the store has no event
// of is not claimed: ErrNoTree.
//
// TakeOver is for a tree whose writer has stopped: taking over a tree a
// live host is writing fences that host's journal and ends its running
// calls in the log as unreachable.
func TakeOver(ctx context.Context, store EventStore, tree, writer string) ([]Event, error) {
	if writer == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		writer = hex.EncodeToString(b[:])
	}
	if first, err := store.EventsAfter(ctx, tree, 0, 1); err != nil {
		return nil, err
	} else if len(first) == 0 {
		return nil, ErrNoTree
	}
	c, err := store.Claim(ctx, tree, writer)
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
		evs, err := store.EventsAfter(ctx, tree, after, 1024)
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
		e.Kind, e.Writer, e.Seq, e.After, e.At = KindFailed, writer, seq, seq-1, now
		e.Child, e.FrameKind, e.FrameSeq, e.Payload, e.Media, e.Refused = "", 0, 0, nil, nil, ""
		e.Error = &ErrorInfo{Code: frame.CodeUnreachable, Message: "calllog: the tree's writer stopped before the call ended; taken over", Synthetic: true}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, nil
	}
	kctx, cancel := context.WithTimeout(ctx, takeOverTimeout)
	defer cancel()
	if err := store.Keep(kctx, c, out); err != nil {
		return nil, err
	}
	return out, nil
}
