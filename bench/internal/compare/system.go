package compare

import (
	"context"
	"errors"
	"time"
)

// errNotApplicable is returned by a system for a workload it has no way to
// run; the reason is in the wrapping error's text.
var errNotApplicable = errors.New("n/a")

// notApplicable returns an error matching errNotApplicable that says why.
func notApplicable(why string) error { return &naError{why: why} }

type naError struct{ why string }

func (e *naError) Error() string        { return "n/a: " + e.why }
func (e *naError) Is(target error) bool { return target == errNotApplicable }

// system is one child-process harness under test. Every method runs real
// processes; each measurement is bounded by its context.
type system interface {
	// name is the system's column name.
	name() string
	// open starts a long-lived child for the throughput and latency
	// workloads. The session's close stops it.
	open(ctx context.Context) (session, error)
	// coldStart starts a child, makes one small call and stops the child;
	// it returns the time from the start until the call succeeded.
	coldStart(ctx context.Context) (time.Duration, error)
	// crash starts a child, makes sure a call is running, SIGKILLs the
	// child and returns the time until the caller saw the failure.
	crash(ctx context.Context) (time.Duration, error)
	// healthUnderBackpressure starts a child, blocks streams streams by
	// backpressure (the caller stops reading), then measures pings health
	// pings one after another.
	healthUnderBackpressure(ctx context.Context, streams, pings int) ([]time.Duration, error)
}

// session is a running child of a system.
type session interface {
	// smallStream receives n frames of about 64 bytes child→host.
	smallStream(ctx context.Context, n int) error
	// media receives n chunks of chunk bytes of binary data child→host.
	media(ctx context.Context, n, chunk int) error
	// echo sends n small frames and receives them back, both at once.
	echo(ctx context.Context, n int) error
	// call makes one small request/response call.
	call(ctx context.Context) error
	// unary makes one small call in the system's unary form: a value in,
	// a value out. It is call for every system but Skulk, whose call
	// streams one chunk each way (see notes).
	unary(ctx context.Context) error
	// close stops the child.
	close() error
}

// payload64 is the small frames' application payload: 64 bytes.
const payloadSize = 64

// mediaChunk is the media workload's chunk: 1 MiB.
const mediaChunk = 1 << 20
