package remote

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skulkrt/skulk/remote/internal/message"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/internal/recorder"
	"github.com/skulkrt/skulk/internal/toolschema"
	"github.com/skulkrt/skulk/wire"
)

// ErrClientClosed: a call made after Client.Close began.
var ErrClientClosed = errors.New("remote: client closed")

// ErrNoTools: the tool list could not be had from any host serving the
// name (none answered in time, or the answer was malformed).
var ErrNoTools = errors.New("remote: no tool list from the service")

// Client calls the tools of the hosts that serve one name on NATS. Its
// calls have host.Call's shape (Send, CloseSend, Recv, Frames, Wait,
// Cancel, exactly one terminal, synthetic failures marked).
//
// A Client is safe for concurrent use. Close ends its calls.
type Client struct {
	nc    *nats.Conn
	name  string
	opts  Options
	frag  int
	inbox string // the prefix of the calls' reply subjects: INBOX.<token>
	sub   *nats.Subscription
	links table

	idPrefix string
	nextCall atomic.Uint64

	catMu sync.Mutex
	cat   *toolschema.Catalog // the latest tool list; nil until fetched

	stop      chan struct{}  // closed by Close: stops beat
	wg        sync.WaitGroup // beat and every call's reader
	closeOnce sync.Once
	closeErr  error
}

// Dial returns a Client of the service name on nc: it subscribes to a
// new inbox of nc's (nats.CustomInboxPrefix sets its prefix) for the
// replies of its calls. nc stays the caller's: Close neither drains nor
// closes it.
//
// Errors: ErrName, ErrOptions, and the NATS client's.
func Dial(nc *nats.Conn, name string, opts Options) (*Client, error) {
	if !validName(name) {
		return nil, fmt.Errorf("%w: the service name", ErrName)
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	c := &Client{nc: nc, name: name, opts: opts.effective(), frag: fragmentFor(nc), inbox: nc.NewInbox(),
		idPrefix: nuid.Next()[:12], stop: make(chan struct{})}
	sub, err := subscribeLinks(nc, c.inbox, func(m *nats.Msg) {
		l := c.links.get(lastToken(m.Subject))
		if l == nil {
			return
		}
		if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
			l.fail(errNoHosts)
			return
		}
		l.deliver(m.Data)
	})
	if err != nil {
		return nil, fmt.Errorf("remote: dial: %w", err)
	}
	c.sub = sub
	c.wg.Add(1)
	go func() { // stopped by Close (c.stop)
		defer c.wg.Done()
		c.links.beat(c.stop, c.opts)
	}()
	return c, nil
}

// Close ends every call of the client with a synthetic unreachable (its
// serving host cancels it) and returns once the client's goroutines have
// exited. It is idempotent.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		for _, l := range c.links.all(true) {
			l.abort(errClosed)
		}
		close(c.stop)
		c.wg.Wait()
		if err := c.sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			c.closeErr = err
		}
	})
	return c.closeErr
}

// Tools returns the tools of the service, as one of its hosts answers
// (hosts serving one name are expected to offer the same tools), and keeps
// them for the schema checks of later calls. Errors: ErrNoTools, or
// ctx's error.
func (c *Client) Tools(ctx context.Context) ([]wire.Tool, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.HeartbeatTimeout)
		defer cancel()
	}
	m, err := c.nc.RequestWithContext(ctx, toolsSubject(c.name), nil)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, nats.ErrNoResponders) {
			return nil, fmt.Errorf("%w: %w", ErrNoTools, ctx.Err())
		}
		return nil, fmt.Errorf("%w: no host answered", ErrNoTools)
	}
	p, err := wire.Decode(m.Data, toolsLimits)
	hello, ok := p.(*wire.Hello)
	if err != nil || !ok {
		return nil, fmt.Errorf("%w: the answer is not a tool list", ErrNoTools)
	}
	cat, err := toolschema.NewCatalog(hello.Tools)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoTools, err)
	}
	c.catMu.Lock()
	c.cat = cat
	c.catMu.Unlock()
	return cat.List(), nil
}

// tool returns the tool named id, fetching the list when there is none
// yet or it does not name id.
func (c *Client) tool(ctx context.Context, id string) (*toolschema.Tool, error) {
	c.catMu.Lock()
	cat := c.cat
	c.catMu.Unlock()
	if cat != nil {
		if t := cat.Tool(id); t != nil {
			return t, nil
		}
	}
	if _, err := c.Tools(ctx); err != nil {
		return nil, err
	}
	c.catMu.Lock()
	defer c.catMu.Unlock()
	if t := c.cat.Tool(id); t != nil {
		return t, nil
	}
	return nil, host.ErrUnknownTool
}

// CallOption sets optional parts of a remote call.
type CallOption func(*callOptions)

type callOptions struct {
	trace  map[string]string
	input  []frame.Payload
	closed bool
	caller *calllog.Link
}

// WithTrace attaches tracing context (W3C traceparent and the like) to
// the invoke, as host.WithTrace does. The map is not copied.
func WithTrace(trace map[string]string) CallOption {
	return func(o *callOptions) { o.trace = trace }
}

// WithCaller names the call this remote call is made for, in a tree of
// the caller's own log (tree is its tree's id, call its id): the serving
// host records the remote call as a tree of its own whose started event
// names them (calllog.Event.Caller). Without it, a call made with a
// context carrying a running call of a host (inside host.Program) is
// recorded as that call's step in the caller's tree, and the remote tree
// names that step. Both ids must be valid call ids (1 to 128 characters
// of UTF-8), or the call is refused, nothing sent, with a
// *frame.FieldError (Field "tree" or "parent", matching
// frame.ErrInvalid).
func WithCaller(tree, call string) CallOption {
	return func(o *callOptions) { o.caller = &calllog.Link{Tree: tree, Call: call} }
}

// WithInput sends the call's whole input with its invoke, as
// host.WithInput does: a chunk per payload, then the caller's completed.
// Send and CloseSend then return host.ErrSendClosed.
func WithInput(payloads ...frame.Payload) CallOption {
	return func(o *callOptions) { o.input, o.closed = payloads, true }
}

// Call starts a call of tool with args (nil means none) on one of the
// hosts serving the name, chosen by the NATS servers (a queue group).
//
// Refusals come back at once and send nothing: host.ErrUnknownTool, a
// *host.SchemaError (arguments checked against the tool's
// arguments_schema, defaults filled, as host.Call does), an error
// matching wire.ErrTooLarge for an invoke or a WithInput chunk over
// the protocol's 64 KiB header, ErrNoTools, ErrClientClosed. Everything else is the call's outcome: a host that
// cannot be reached, dies, or falls silent gives a synthetic failed
// unreachable within Options.UnreachableBound; a lost message a
// synthetic transport_error; a malformed or forged message a synthetic
// invalid_frame.
//
// A ctx carrying a running call of a host (host.Program) records the
// call as that call's step in the host's call log, whose request names
// the tree the serving host records it in (docs/events.md, "Trees across
// hosts"); that host's recorder may refuse it, nothing sent: a
// *calllog.JournalError matching calllog.ErrJournalStart (a required
// journal that did not keep the start), calllog.ErrParentEnded, or
// host.ErrClosed when that host is closing.
//
// ctx governs the whole call: its deadline becomes the invoke's
// timeout_ms, enforced by the remote child (the client gives a synthetic
// timeout CancelWait after it if no terminal came), and cancelling it
// cancels the call. The returned Call must be read to its terminal or
// cancelled.
func (c *Client) Call(ctx context.Context, tool string, args frame.Payload, opts ...CallOption) (*Call, error) {
	var o callOptions
	for _, f := range opts {
		f(&o)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t, err := c.tool(ctx, tool)
	if err != nil {
		return nil, err
	}
	if args != nil {
		if err := protocol.CheckPayload(args); err != nil {
			return nil, &host.SchemaError{Schema: "arguments", Value: "not a JSON object"}
		}
	}
	if args, err = t.WithDefaults(args); err != nil {
		return nil, schemaRefusal(err)
	}
	if err := schemaRefusal(t.Arguments.Validate(args)); err != nil {
		return nil, err
	}
	for _, p := range o.input {
		if err := protocol.CheckPayload(p); err != nil {
			return nil, err
		}
		if err := schemaRefusal(t.Input.Validate(p)); err != nil {
			return nil, err
		}
	}
	id := c.idPrefix + "-" + strconv.FormatUint(c.nextCall.Add(1), 10)
	inv := &wire.Invoke{CallID: id, ToolID: tool, Arguments: args, Trace: o.trace}
	if d, ok := ctx.Deadline(); ok {
		inv.TimeoutMS = max(time.Until(d).Milliseconds(), 1)
	}
	call := newCall(c, t, id, ctx)
	if o.caller != nil {
		for _, id := range []struct{ field, v string }{{"tree", o.caller.Tree}, {"parent", o.caller.Call}} {
			if err := protocol.CheckCallID(id.v); err != nil {
				return nil, &frame.FieldError{Field: id.field, Reason: "WithCaller: not a call id of 1 to 128 characters"}
			}
		}
		inv.Tree, inv.Parent = o.caller.Tree, o.caller.Call
	} else {
		rec, err := recorder.BeginStep(ctx, recorder.CallInfo{ID: id, Tool: tool, ToolVersion: t.Desc.Version, Args: args})
		if errors.Is(err, recorder.ErrClosed) {
			return nil, host.ErrClosed // the caller's host is closing: nothing recorded
		}
		if err != nil {
			return nil, err // the caller's recorder refused the step (and recorded why, when it could)
		}
		if rec != nil {
			call.rec = rec
			inv.Tree, inv.Parent = rec.Tree(), rec.ID()
		}
	}
	b, err := call.initial(inv, o.input, o.closed)
	if err != nil {
		return nil, call.refused(ctx, "invalid", frame.CodeInvalidFrame, err)
	}
	token := nuid.Next()
	l := newLink(c.nc, token, uint64(c.opts.Window), c.frag)
	l.caller, l.onTree = true, call.named
	call.l = l
	if !c.links.add(l, &c.wg) { // for call.read: Close closes the table, then waits
		return nil, call.refused(ctx, "host_closed", frame.CodeUnreachable, ErrClientClosed)
	}
	first := b[:min(len(b), message.MaxOpenData, c.frag)]                                                   // an open fits the server's max_payload too
	_ = l.publishTo(callSubject(c.name), c.inbox+"."+token, message.KindOpen, uint64(c.opts.Window), first) // a failed publish fails the link
	l.sent = uint64(len(first))
	go call.read() // ends at the call's terminal; Close ends every call
	call.startClocks()
	if rest := b[len(first):]; len(rest) > 0 {
		call.sendMu.Lock()
		err := l.write(ctx, rest)
		call.sendMu.Unlock()
		if err != nil && ctx.Err() != nil {
			l.abort(&linkError{frame.CodeCancelled, "the call's context ended while its invoke was sent"})
		}
	}
	return call, nil
}

// schemaRefusal gives toolschema's refusal as a *host.SchemaError.
func schemaRefusal(err error) error {
	if e, ok := err.(*toolschema.Error); ok {
		return (*host.SchemaError)(e)
	}
	return err
}
