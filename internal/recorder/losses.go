package recorder

import "sync/atomic"

// Losses counts what the call log did not deliver since New: the events
// an observer or a journal never had, and the journal sends that failed.
// Each counter only grows; a loss is also warned about once, on the
// recorder's logger, where it first happens.
type Losses struct {
	// ObserverEvents counts events not given to an observer: its queue
	// (ObserverQueue) was full (a middle event, or a call dropped whole),
	// it had failed (returned an error or panicked), or Close gave up on
	// its queue.
	ObserverEvents uint64
	// ObserversFailed counts observers that returned an error or panicked
	// and so are given nothing more.
	ObserversFailed uint64
	// JournalEvents counts events a journal did not keep: its queue
	// (calllog.Journal.Queue, QueueBytes) was full (a middle event, or a
	// call dropped whole), or its tree's writer stopped (an unusable
	// store, a fence, Close) with them queued or after.
	JournalEvents uint64
	// JournalValues counts call starts and ends a journal kept without
	// their payload's value (Content.ValueDropped): its queue had room for
	// the event but not for its value (calllog.Journal.QueueBytes).
	JournalValues uint64
	// JournalSendErrors counts attempts to keep a batch that failed or
	// went unanswered; the batch is sent again unless the writer stops.
	JournalSendErrors uint64
}

// losses are the recorder's counters behind Losses. They move only when
// something is lost or fails, never on the path of an event that is
// delivered.
type losses struct {
	observerEvents, observersFailed, journalEvents, journalValues, journalSendErrors atomic.Uint64
}

// Losses returns the recorder's loss counters. Safe for concurrent use.
func (r *Recorder) Losses() Losses {
	return Losses{
		ObserverEvents:    r.lost.observerEvents.Load(),
		ObserversFailed:   r.lost.observersFailed.Load(),
		JournalEvents:     r.lost.journalEvents.Load(),
		JournalValues:     r.lost.journalValues.Load(),
		JournalSendErrors: r.lost.journalSendErrors.Load(),
	}
}
