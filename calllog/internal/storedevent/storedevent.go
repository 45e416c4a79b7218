// Package storedevent holds what the module's event stores
// (calllog/sqlitestore, calllog/jetstreamstore) share when they keep and
// read events: the check of a batch to keep, the bounds of one read
// (docs/events.md, "Reading is bounded"), the error of an event too large
// to read, and the kinds by name.
package storedevent

import (
	"errors"
	"fmt"

	"github.com/skulkrt/skulk/calllog"
)

// Read bounds of the module's stores: what one EventsAfter holds, whatever
// the journal's size.
const (
	// PageBytes bounds the stored size of the events one EventsAfter
	// returns: a page ends at the first event that reaches it (so one
	// event is always returned, up to MaxEventBytes).
	PageBytes = 4 << 20
	// MaxEventBytes is the largest stored event a reader decodes; a larger
	// one is reported as a *calllog.CorruptEventError (a loss) without
	// being read.
	MaxEventBytes = 64 << 20
)

// errBadBatch is CheckBatch's error.
var errBadBatch = errors.New("calllog: bad batch: events of another tree, numbered 0 or out of order")

// CheckBatch reports whether events may be kept under c as far as their
// own numbering shows: every event is of c.Tree, Seq ≥ 1, strictly
// ascending (calllog.EventStore's Keep). A store makes this check before
// it keeps a batch (fencing and gaps against what is kept are its own)
// and returns its error as it is.
func CheckBatch(c calllog.Claim, events []calllog.Event) error {
	var prev uint64
	for _, e := range events {
		if e.Tree != c.Tree || e.Seq == 0 || e.Seq <= prev {
			return errBadBatch
		}
		prev = e.Seq
	}
	return nil
}

// ErrTooLarge is the Err of a *calllog.CorruptEventError for an event
// larger than MaxEventBytes. It matches calllog.ErrFormat.
var ErrTooLarge = fmt.Errorf("%w: event: larger than 64 MiB", calllog.ErrFormat)

// Decode reads one event's stored JSON form. Every error it returns matches
// calllog.ErrFormat (json.Unmarshal's own syntax errors would not).
func Decode(data []byte) (calllog.Event, error) {
	var e calllog.Event
	err := e.UnmarshalJSON(data)
	return e, err
}

// ParseKind returns the Kind whose JSON name is s ("done"); false for an
// unknown name.
func ParseKind(s string) (calllog.Kind, bool) {
	for k := calllog.KindStarted; k <= calllog.KindUnknown; k++ {
		if k.String() == s {
			return k, true
		}
	}
	return 0, false
}
