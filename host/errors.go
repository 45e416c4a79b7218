package host

import (
	"errors"
	"fmt"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host/internal/contain"
	"github.com/skulkrt/skulk/internal/toolschema"
	"github.com/skulkrt/skulk/wire"
)

// Errors callers act on. Match them with errors.Is.
var (
	// ErrUnknownTool: the call names a tool no child offers. The call was
	// refused before anything was sent.
	ErrUnknownTool = errors.New("host: unknown tool")
	// ErrPoolDown: every child of the pool gave up restarting. The error
	// also wraps the last cause (errors.Unwrap gives both).
	ErrPoolDown = errors.New("host: pool down")
	// ErrClosed: the Host is closing or closed.
	ErrClosed = errors.New("host: closed")
	// ErrSendClosed: Send or CloseSend after the caller's direction was
	// closed (CloseSend, Cancel) or after the provider's terminal.
	ErrSendClosed = errors.New("host: send on a closed call")
	// ErrHandshake: the child's start failed: it sent no hello within
	// Config.StartTimeout, offered no protocol version the host speaks, or
	// broke the handshake (its first control packet was not a valid hello,
	// or its tools' schemas do not compile). The message says which.
	ErrHandshake = errors.New("host: handshake failed")
	// ErrChildDied is the cause recorded when a child's process exits or its
	// control connection ends without a drain.
	ErrChildDied = errors.New("host: child died")
	// ErrUnhealthy is the cause recorded when a child answers no ping
	// within Config.HealthTimeout, or leaves the host's writes on its
	// control connection unread for as long (docs/operations.md,
	// "Health").
	ErrUnhealthy = errors.New("host: child unhealthy: no pong in time")
	// ErrChildLeft is the cause recorded when a child says bye without
	// being drained: the host sends it no new calls, lets the running ones
	// finish as in a drain, and restarts it once it exited (the restart
	// counts against Config.Restart).
	ErrChildLeft = errors.New("host: child said bye without a drain")
	// ErrCallsLost is the cause recorded when a child is recycled because
	// it lost calls: two pongs in a row counted fewer running streams than
	// the host had calls on it that the child must count
	// (docs/operations.md, "Health"). The calls it lost end with a
	// synthetic unreachable; the recycle does not count against
	// Config.Restart.
	ErrCallsLost = errors.New("host: child lost calls")
	// ErrMemoryLimit is the cause recorded when the kernel killed a child
	// (or a process it started) for Config.MemoryMax; it comes with
	// ErrChildDied, and the calls in flight get a synthetic unreachable
	// whose message says so.
	ErrMemoryLimit = errors.New("host: the child reached its memory limit")
	// ErrLimitUnavailable: Start was asked for a limit (Config.MemoryMax,
	// PidsMax, CPUMax) whose cgroup controller this machine, or the host's
	// place in the cgroup tree or its privileges, does not offer. The
	// message names the limit and says why; a limit is never ignored.
	ErrLimitUnavailable = contain.ErrLimitUnavailable
)

// handshakeError is one way a child's start failed that has no detail to
// wrap; every one matches ErrHandshake.
type handshakeError struct{ msg string }

func (e *handshakeError) Error() string { return e.msg }

// Is makes every handshakeError match ErrHandshake.
func (e *handshakeError) Is(target error) bool { return target == ErrHandshake }

// Start failures that match ErrHandshake.
var (
	// errProtocolVersion: the child offers no protocol version the host
	// speaks; its start failed and it was stopped.
	errProtocolVersion = &handshakeError{"host: child offers no protocol version the host speaks"}
	// errStartTimeout: the child sent no hello within Config.StartTimeout.
	errStartTimeout = &handshakeError{"host: child start timed out"}
)

// callError is how the host gives the *frame.Error of a call that did not
// complete: the provider's failed or cancelled terminal, or one the host
// made up in its place (Synthetic). errors.As finds the *frame.Error. It
// keeps the tail of a dead child's stderr (see Stderr) and, when the call
// ended because the context it was started with ended, that context's
// error, so that errors.Is(err, context.DeadlineExceeded) or errors.Is(err,
// context.Canceled) holds, as for any context-bound Go call.
type callError struct {
	err *frame.Error
	// stderr is the tail (at most 64 KiB) of the child's stderr when the
	// call failed because the child died; empty otherwise.
	stderr string
	// ctxErr is the call context's error when the call ended because that
	// context ended; nil otherwise.
	ctxErr error
}

func (e *callError) Error() string { return "host: call " + e.err.Error() }

// Unwrap returns the call's *frame.Error and, when the call ended because
// its context ended, that context's error.
func (e *callError) Unwrap() []error {
	if e.ctxErr == nil {
		return []error{e.err}
	}
	return []error{e.err, e.ctxErr}
}

// Stderr returns the tail (at most 64 KiB) of the child's stderr that err,
// an error of a call (Host.Call, Call.Wait, Recv, Frames, Send), carries
// when the call failed because its child died; "" otherwise.
func Stderr(err error) string {
	var ce *callError
	if errors.As(err, &ce) {
		return ce.stderr
	}
	return ""
}

// callErrorOf returns the callError of a failed or cancelled terminal, or
// nil for a completed one.
func callErrorOf(f *frame.Frame, stderr string) *callError {
	switch f.Kind {
	case frame.KindFailed:
		return &callError{err: &frame.Error{Code: f.Error.Code, Message: f.Error.Message, Synthetic: f.Synthetic}, stderr: stderr}
	case frame.KindCancelled:
		fe := &frame.Error{Code: frame.CodeCancelled, Synthetic: f.Synthetic}
		if f.Error != nil {
			fe.Message = f.Error.Message
		}
		return &callError{err: fe, stderr: stderr}
	}
	return nil
}

// poolDownError wraps ErrPoolDown and the last cause.
type poolDownError struct{ cause error }

func (e *poolDownError) Error() string {
	if e.cause == nil {
		return ErrPoolDown.Error()
	}
	return ErrPoolDown.Error() + ": " + e.cause.Error()
}

func (e *poolDownError) Unwrap() []error { return []error{ErrPoolDown, e.cause} }

// RefusedError is the error of a call refused before anything reached a
// child and recorded in the call log (docs/protocol.md §7, "Refused calls": an
// unknown tool, arguments or input against the schema, a pool that is
// down, a host that closed while the call waited, a request over the
// limits). Unwrap gives why; errors.Is and errors.As see through to
// it (ErrUnknownTool, *SchemaError, ErrPoolDown, ...). Tree is the id of
// the call tree the call log recorded the refusal in, to find it in a
// journal.
type RefusedError struct {
	// Tree is the id of the call tree the refusal was recorded in.
	Tree string
	err  error // why the call was refused
}

func (e *RefusedError) Error() string { return e.err.Error() }

// Unwrap returns why the call was refused.
func (e *RefusedError) Unwrap() error { return e.err }

// SchemaError reports a payload that breaks one of a tool's schemas. It names
// the schema, the field (a JSON pointer into the payload, "" for the whole
// payload), the keyword that failed and what the value is (its JSON type
// and size), never the value itself, so it is safe to log. Call (also
// with WithArgumentFragments) and Send refuse arguments and input with it (nothing sent); a provider
// frame that breaks output_schema or result_schema fails its call with a
// synthetic invalid_frame whose message is its Error. Match it with
// errors.As.
type SchemaError struct {
	// Schema is "arguments", "input", "output" or "result".
	Schema string
	// Field is the JSON pointer of the offending value ("/options/level");
	// "" means the payload itself.
	Field string
	// Keyword is the JSON Schema keyword that failed ("type", "minimum",
	// "required", …); "" when the payload could not be read at all.
	Keyword string
	// Value describes the offending value: its JSON type and size
	// ("string of 12 bytes", "array of 3 items", "number").
	Value string
}

func (e *SchemaError) Error() string {
	return "host: " + (*toolschema.Error)(e).Error()
}

// errNoMedia refuses a caller chunk without media to a tool whose
// descriptor says every caller chunk carries media (input_media).
func errNoMedia() error {
	return &SchemaError{Schema: "input", Keyword: "input_media", Value: "a chunk without media"}
}

// schemaRefusal gives the schema engine's refusal to the caller as a
// *SchemaError (the same fields: the conversion copies nothing); other
// errors pass unchanged.
func schemaRefusal(err error) error {
	if e, ok := err.(*toolschema.Error); ok {
		return (*SchemaError)(e)
	}
	return err
}

// validate checks p against v (nil accepts any object); its refusal is a
// *SchemaError.
func validate(v *toolschema.Validator, p frame.Payload) error {
	return schemaRefusal(v.Validate(p))
}

// newCatalog compiles the tools of a child's hello; a duplicate id or a
// schema that does not compile fails the handshake (ErrHandshake).
func newCatalog(tools []wire.Tool) (*toolschema.Catalog, error) {
	c, err := toolschema.NewCatalog(tools)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	return c, nil
}

// errControlUnread is the ErrUnhealthy of a child that left the host's
// writes on its control connection unread for a whole HealthTimeout. Its
// message is its own: such a child may well answer every ping, so
// ErrUnhealthy's "no pong in time" would misname the cause.
var errControlUnread error = unhealthyError("its control connection left unread")

// unhealthyError is an ErrUnhealthy with a reason of its own.
type unhealthyError string

func (e unhealthyError) Error() string { return "host: child unhealthy: " + string(e) }

func (e unhealthyError) Unwrap() error { return ErrUnhealthy }
