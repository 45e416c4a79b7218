package recorder

// JournalQueued returns the room the journal queues take: events queued
// and not kept, with the room held for open calls' ends.
func (r *Recorder) JournalQueued() (events, bytes int64) { return r.budget.used() }
