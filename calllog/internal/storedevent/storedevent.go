// Package storedevent holds what the module's event stores
// (calllog/sqlitestore, calllog/jetstreamstore) share when they read kept
// events: the bounds of one read (docs/events.md, "Reading is bounded"),
// the error of an event too large to read, and the kinds by name.
package storedevent

import (
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
