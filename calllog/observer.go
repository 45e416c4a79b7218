package calllog

import "context"

// Observer receives events as they happen, in order, on a goroutine of its
// own: a slow, blocked or failing observer never slows a call. It is given
// the kept form of events (see Options.FullContent). Observers are set on
// a host (Options.Observers), on a program or on a call
// (host.WithObservers); each is given the calls of the layer it was set on.
//
// At most 10,000 events wait for one observer, counting one held for the
// end of every call whose start it was given and not yet the end. An
// observer further behind loses the middle events (requests, chunks,
// inputs, retries, fragments) that do not fit in three quarters of that
// (drop newest), and sees the loss: the next event it is given has an
// After it was not given. It keeps every call's boundaries: it is given
// the end of every call whose start it was given; a start that does not
// fit with room for its end is dropped with every event of its call and
// of the calls made inside it. So an observer never sees a call started
// and not ended. (An observer that takes no starts, see WantsKind below, is
// given ends while they fit.)
//
// An observer that needs only some kinds of event (a metrics observer
// that counts calls wants started and end events, not every chunk) also
// has the method
//
//	WantsKind(k Kind) bool
//
// and is given only the events of the kinds it reports true for (asked
// once per kind, when the host starts the observer). The others are never
// queued for it, so they cost it nothing and are not losses: the After of
// the next event it is given is the last event it was given, as ever.
//
// Observe's ctx is done when the host closes; an observer must return
// then. Calls begun with ctx (or a context derived from it) are not given to
// this observer, nor to the observers whose events led to it. An observer
// that returns an error or panics is warned about once (on the host's
// logger) and given nothing more.
type Observer interface {
	Observe(ctx context.Context, e Event) error
}
