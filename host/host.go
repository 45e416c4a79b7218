package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host/internal/contain"
	"github.com/skulkrt/skulk/host/internal/otelcall"
	"github.com/skulkrt/skulk/internal/childstate"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/internal/recorder"
	"github.com/skulkrt/skulk/internal/toolschema"
	"github.com/skulkrt/skulk/internal/turns"
	"github.com/skulkrt/skulk/wire"
)

// Host supervises a pool of children running one command and drives calls
// to them. Create it with Start; it must be closed with Close, which drains
// and stops every child. Its methods are safe for concurrent use.
type Host struct {
	cfg      Config // with defaults applied
	log      *slog.Logger
	idPrefix string
	nextCall atomic.Uint64
	traffic  traffic             // frames and media bytes by direction (Stats)
	busy     *turns.Gate         // where busy stream readers take turns (readpace.go)
	rec      *recorder.Recorder  // records every call (Config.CallLog); closed by Close
	tracing  *otelcall.Tracing   // Config.TracerProvider
	contain  *contain.Set        // starts the children and keeps their descendants; closed by Close after every child was reaped
	cred     *syscall.Credential // Config.User and Group resolved; nil: the host's

	life context.Context // cancelled when Close begins: aborts starts and backoffs
	stop context.CancelFunc
	wg   sync.WaitGroup // one per slot supervisor

	slots []*slot

	mu       sync.Mutex // guards the fields below and the pool state of every slot and child
	closing  bool
	closeCtx context.Context     // Close's context, set when closing
	changed  chan struct{}       // made by a waiting acquire, closed and cleared whenever the pool changes (a slot freed, a child up or down)
	cat      *toolschema.Catalog // the catalogue of the latest child that started or sent a tools packet
	toolsNew chan struct{}       // made by ToolsChanged, closed and cleared when cat is replaced
	pings    pingHist            // ping round trips (Stats)

	// childrenNew is made by ChildrenChanged, closed and cleared when a
	// slot's state changes (setStateLocked).
	childrenNew chan struct{}

	closeOnce sync.Once // a later Close waits in Do for the first to finish
	closeErr  error     // set inside closeOnce
}

// childState is the state of one slot of the pool; ChildInfo.State is its
// name.
type childState uint8

// Child states.
const (
	// stateStarting: the child is being started or restarted.
	stateStarting childState = iota + 1
	// stateReady: the child takes calls.
	stateReady
	// stateDraining: the child finishes its calls and takes no new ones
	// (Close, or a recycle because of stuck handlers).
	stateDraining
	// stateDead: the child died or was found unhealthy and is being
	// stopped; a restart follows unless the policy gives up.
	stateDead
	// stateDown: the restart policy gave up on this slot.
	stateDown
)

// String returns the state's name, or "childState(n)" for an unknown value.
func (s childState) String() string {
	if s >= stateStarting && s <= stateDown {
		return childstate.Names()[s-stateStarting]
	}
	return fmt.Sprintf("childState(%d)", uint8(s))
}

// ChildInfo describes one slot of the pool, as Children reports it.
type ChildInfo struct {
	// ID is the current child's id (SKULK_CHILD_ID); it changes with every
	// restart.
	ID string
	// PID is the current child's process id; 0 while none runs.
	PID int
	// State is the slot's state, one of:
	//
	//   - "starting": the child is being started or restarted;
	//   - "ready": the child takes calls;
	//   - "draining": the child finishes its calls and takes no new ones
	//     (Close, or a recycle because of stuck handlers);
	//   - "dead": the child died or was found unhealthy and is being
	//     stopped; a restart follows unless the policy gives up;
	//   - "down": the restart policy gave up on this slot.
	State string
	// Restarts counts the restarts of this slot since Start (recycles
	// included).
	Restarts int
	// Running counts the calls holding a stream slot of the child.
	Running int
	// MaxStreams is the child's max_streams; 0 while none runs.
	MaxStreams int
	// Streams is the child's count of handlers that have not returned,
	// from its latest pong.
	Streams int
	// Stuck is the child's count of cancelled handlers still running past
	// their grace, from its latest pong.
	Stuck int
	// LastCause is why the previous child of this slot stopped; nil if
	// none did.
	LastCause error
}

// Start starts cfg.PoolSize children at once and completes each one's
// handshake (hello, then startup) before it returns, so a pool starts in
// about the time of its slowest child. ctx bounds the start only; the Host
// lives until Close. A config field that makes no sense fails Start with
// an error matching ErrConfig, naming the field, before anything starts.
// The first child that fails to start fails Start with
// its error (one matching ErrHandshake, the exec error, or ctx's): the
// other starts are cancelled, every child that did start is stopped, and
// nothing is left behind.
func Start(ctx context.Context, cfg Config) (*Host, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	h := &Host{
		cfg:      cfg.withDefaults(),
		idPrefix: hex.EncodeToString(rnd[:]),
		busy:     turns.New(runtime.GOMAXPROCS(0)),
	}
	h.log = h.cfg.Logger
	h.tracing = otelcall.New(h.cfg.TracerProvider)
	rec, err := recorder.New(h.cfg.CallLog, h.log)
	if err != nil {
		return nil, err
	}
	h.rec = rec
	h.life, h.stop = context.WithCancel(context.Background())
	if h.cred, err = h.cfg.credential(); err != nil {
		h.rec.Close(context.Background())
		return nil, err
	}
	h.contain, err = contain.New(contain.Options{
		Limits:      contain.Limits{MemoryBytes: h.cfg.MemoryMax, Pids: h.cfg.PidsMax, CPU: h.cfg.CPUMax},
		NoSubreaper: h.cfg.NoSubreaper,
		NoCgroups:   h.cfg.NoCgroups,
		NoNewPrivs:  h.cfg.NoNewPrivs,
	}, h.log)
	if err != nil {
		h.rec.Close(context.Background())
		return nil, fmt.Errorf("host: %w", err)
	}
	if err := h.startPool(ctx); err != nil {
		h.contain.Close()
		h.rec.Close(context.Background())
		return nil, err
	}
	for _, s := range h.slots {
		h.wg.Add(1)
		go h.supervise(s, s.cur) // stopped by Close (h.life); Close waits through h.wg
	}
	h.wg.Add(1)
	// One pass over TempDir for what hosts that are gone left (sweepStale),
	// after the children started. Close waits for it rather than stopping
	// it, so that a short-lived host sweeps too.
	go func() {
		defer h.wg.Done()
		sweepStale(h.cfg.tempBase(), time.Now(), h.log)
	}()
	return h, nil
}

// startPool starts the children of every slot at once, each on a
// goroutine of its own owned by one errgroup and waited for before it
// returns. The first start that fails cancels the others (their handshakes
// end with the group's context, and a start that fails stops its own
// process); once all have returned, the children that did start are
// stopped, so nothing is left behind, and the first failure is returned.
func (h *Host) startPool(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	h.slots = make([]*slot, h.cfg.PoolSize)
	for i := range h.slots {
		s := &slot{index: i, state: stateStarting}
		h.slots[i] = s
		g.Go(func() error { // ends with the child's start; waited for by g.Wait
			_, err := h.startChild(gctx, s)
			return err
		})
	}
	err := g.Wait()
	if err == nil {
		return nil
	}
	h.stop()
	// The children that did start are stopped at once, not one after
	// another: each may take KillGrace to leave.
	var stops sync.WaitGroup
	for _, s := range h.slots {
		if ch := s.cur; ch != nil {
			stops.Go(func() { ch.stop(err, stopDead) }) // never supervised; waited for below
		}
	}
	stops.Wait()
	return err
}

// Tools returns the tool catalogue of the children: ids, descriptions and
// schemas, from the hello of the child that started last or the tools
// packet a running child sent since (ToolsChanged says when it changes).
// The slice is shared: do not modify it.
func (h *Host) Tools() []wire.Tool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cat.List()
}

// ToolsChanged returns a channel that is closed when the catalogue Tools
// returns is next replaced: a child started or restarted (perhaps a new
// build with other tools), or a running child sent a new tool list
// (docs/protocol.md §3, tools). Read Tools after it is closed, and call
// ToolsChanged again for the change after that; the new list may equal
// the old one. Safe to call concurrently; the channel is never closed by
// Close.
func (h *Host) ToolsChanged() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.toolsNew == nil {
		h.toolsNew = make(chan struct{})
	}
	return h.toolsNew
}

// setCatalogLocked makes cat the catalogue of new calls and wakes
// ToolsChanged's waiters. h.mu must be held.
func (h *Host) setCatalogLocked(cat *toolschema.Catalog) {
	h.cat = cat
	if h.toolsNew != nil {
		close(h.toolsNew)
		h.toolsNew = nil
	}
}

// Children describes every slot of the pool.
func (h *Host) Children() []ChildInfo {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]ChildInfo, len(h.slots))
	for i, s := range h.slots {
		info := ChildInfo{State: s.state.String(), Restarts: s.restarts, LastCause: s.lastCause}
		if ch := s.cur; ch != nil {
			info.ID, info.PID, info.Running = ch.id, ch.proc.pid, ch.running
			info.MaxStreams, info.Streams, info.Stuck = ch.maxStreams, ch.streams, ch.stuck
		}
		out[i] = info
	}
	return out
}

// ChildrenChanged returns a channel that is closed when the State of a
// slot Children describes next changes: a child became ready, died,
// started draining, is being restarted, or its slot is down. Read
// Children after it is closed, and call ChildrenChanged again for the
// change after that; the new states may equal the old ones. It lets a
// supervisor of the host (such as an MCP gateway) see a restart or a
// crash loop at once without polling Children. Safe to call
// concurrently; Close closes it too, as its children stop.
func (h *Host) ChildrenChanged() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.childrenNew == nil {
		h.childrenNew = make(chan struct{})
	}
	return h.childrenNew
}

// setStateLocked sets s's state; a change wakes ChildrenChanged's
// waiters. Every change of a slot's state goes through it. h.mu must be
// held.
func (h *Host) setStateLocked(s *slot, st childState) {
	if s.state == st {
		return
	}
	s.state = st
	if h.childrenNew != nil {
		close(h.childrenNew)
		h.childrenNew = nil
	}
}

// notifyLocked wakes every goroutine waiting for the pool to change. h.mu
// must be held.
func (h *Host) notifyLocked() {
	if h.changed != nil {
		close(h.changed)
		h.changed = nil
	}
}

// acquire picks the least loaded ready child with a free stream slot and
// takes the slot, waiting while there is none. It also counts the
// call in the child's WaitGroup (until Call.release).
func (h *Host) acquire(ctx context.Context) (*child, error) {
	for {
		h.mu.Lock()
		if h.closing {
			h.mu.Unlock()
			return nil, ErrClosed
		}
		var best *child
		allDown := true
		var cause error
		for _, s := range h.slots {
			if s.state != stateDown {
				allDown = false
			} else if cause == nil {
				cause = s.lastCause
			}
			ch := s.cur // when set, s.state is ch.state
			if ch == nil || ch.state != stateReady || ch.running >= ch.maxStreams {
				continue
			}
			if best == nil || ch.running < best.running {
				best = ch
			}
		}
		if best != nil {
			best.running++
			if best.running == 1 {
				best.routed()
			}
			best.wg.Add(1) // the call, until Call.release
			h.mu.Unlock()
			return best, nil
		}
		if allDown {
			h.mu.Unlock()
			if cause == nil {
				cause = ErrChildDied
			}
			return nil, &poolDownError{cause: cause}
		}
		if h.changed == nil {
			h.changed = make(chan struct{})
		}
		wait := h.changed
		h.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// newCallID returns a call id unique within this host.
func (h *Host) newCallID() string {
	var buf [32]byte // the 8-hex-digit prefix, '-', at most 20 digits
	b := append(append(buf[:0], h.idPrefix...), '-')
	return string(strconv.AppendUint(b, h.nextCall.Add(1), 10))
}

// CallOption sets optional parts of a call: fields of its invoke, its
// observers, its input.
type CallOption func(*callOptions)

// callOptions is what the CallOptions of one call set.
type callOptions struct {
	trace       map[string]string
	observers   []calllog.Observer
	streamed    bool             // set by WithArgumentFragments: the request event carries the arguments
	fragments   iter.Seq[string] // WithArgumentFragments
	input       []frame.Payload
	closedInput bool       // WithInput: the caller's whole input goes with the invoke
	span        trace.Span // the call's client span; nil when tracing is off
}

func gatherOptions(opts []CallOption) *callOptions {
	o := &callOptions{}
	for _, f := range opts {
		f(o)
	}
	return o
}

// WithTrace attaches tracing context (W3C traceparent and the like) to the
// invoke. The map is not copied; do not modify it afterwards.
func WithTrace(trace map[string]string) CallOption {
	return func(o *callOptions) { o.trace = trace }
}

// WithObservers adds observers to the call (or program): they are given
// its events and, for a program, its steps' — on top of the host's and of
// any enclosing program's.
func WithObservers(obs ...calllog.Observer) CallOption {
	return func(o *callOptions) { o.observers = append(o.observers, obs...) }
}

// WithInput sends the call's whole input with its invoke: a chunk for each
// payload (none for no input), then the caller's completed, all in one
// write with the invoke. Use it for a plain request, whose input is known
// when it is made: the child then answers it on the goroutine the request
// woke, without switching to another, and Send and CloseSend are not
// needed (they return ErrSendClosed). (Every call's Recv, or Wait, reads
// the answer from the connection itself, rather than through the
// connection's reader goroutine, until something needs the connection read
// while the caller is not in Recv.) Each payload must be a JSON object
// that passes the tool's input_schema, or the call is refused as for bad
// arguments (a *SchemaError, nothing sent). The payloads are not copied;
// do not modify them afterwards.
func WithInput(payloads ...frame.Payload) CallOption {
	return func(o *callOptions) { o.input, o.closedInput = payloads, true }
}

// Call starts a call of tool with args (nil means no arguments) on the
// least loaded child, waiting for a free stream slot while every child is
// at its max_streams (bounded by ctx).
//
// Every call is recorded in the call log (Config.CallLog), refused ones
// included. A call whose ctx carries a running call (Program) is a step of
// it, in its tree; Detached starts trees of their own.
//
// Refusals come back at once and send nothing. Each is a *RefusedError,
// whose Tree names the call tree the refusal was recorded in, wrapping the
// reason, to match with errors.Is or errors.As: ErrUnknownTool, a
// *SchemaError for arguments that break the tool's arguments_schema,
// ErrPoolDown, ErrClosed, or an error matching wire.ErrTooLarge for
// an invoke (or a WithInput chunk) over the child's max_header. They are
// recorded as a started and a failed event with Refused set; a call made
// once Close began is not recorded and gets ErrClosed bare. A ctx done
// while the call waits for a slot gives ctx's error (recorded as
// cancelled). With a
// required journal, a start the journal did not keep refuses the call with
// a *calllog.JournalError matching calllog.ErrJournalStart; a refusal
// whose end the journal could not confirm comes back joined with a
// *calllog.JournalError matching calllog.ErrJournalEnd. A child that dies
// just as the call starts gives a synthetic *frame.Error (unreachable or
// transport_error) instead of a Call. Arguments left out that have a
// "default" in the schema are filled in first, so the invoke carries the
// values the provider gets.
//
// ctx governs the whole call, as exec.CommandContext's does: its deadline
// becomes the invoke's timeout_ms, and cancelling it cancels the call. The
// returned Call must be read to its terminal (Recv, Frames or Wait):
// until then it holds a stream slot and the child's output waits for it,
// in the socket (backpressure): the caller's Recv reads the connection
// itself. A Send that has to wait for the child, a Cancel or the deadline
// gives the reading to the connection's own goroutine instead, so that a
// child waiting for its output to be read never waits for the caller.
func (h *Host) Call(ctx context.Context, tool string, args frame.Payload, opts ...CallOption) (*Call, error) {
	t, err := h.lookupTool(tool)
	if err != nil {
		return nil, err
	}
	o := gatherOptions(opts)
	if o.fragments != nil {
		return h.callStreamed(ctx, tool, t, args, o)
	}
	argsOK := args == nil || protocol.CheckPayload(args) == nil
	logged := args
	if !argsOK {
		logged = nil // not an object: the log keeps no shape of it
	}
	rec, err := h.begin(ctx, tool, t, logged, o)
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, h.refuse(ctx, rec, "unknown_tool", frame.CodeInvalidFrame, ErrUnknownTool)
	}
	if !argsOK {
		err = &SchemaError{Schema: "arguments", Value: "not a JSON object"}
	} else {
		args, err = checkArguments(t, args)
	}
	if err != nil {
		o.endSpanRefused(err)
		return nil, h.refuse(ctx, rec, "schema", frame.CodeInvalidFrame, err)
	}
	return h.dispatch(ctx, rec, t, args, o)
}

// lookupTool returns the tool named id in the latest catalogue (nil when
// there is none) or ErrClosed.
func (h *Host) lookupTool(id string) (*toolschema.Tool, error) {
	h.mu.Lock()
	closing, cat := h.closing, h.cat
	h.mu.Unlock()
	if closing {
		return nil, ErrClosed
	}
	return cat.Tool(id), nil
}

// checkArguments fills in defaults and validates args against t's
// arguments_schema.
func checkArguments(t *toolschema.Tool, args frame.Payload) (frame.Payload, error) {
	args, err := t.WithDefaults(args)
	if err != nil {
		return nil, schemaRefusal(err)
	}
	if err := validate(t.Arguments, args); err != nil {
		return nil, err
	}
	return args, nil
}

// begin records a call's start. Its error is the call's: ErrClosed, or the
// recorder's refusal (ErrJournalStart, ErrParentEnded).
func (h *Host) begin(ctx context.Context, id string, t *toolschema.Tool, args frame.Payload, o *callOptions) (*recorder.Record, error) {
	info := recorder.CallInfo{ID: h.newCallID(), Tool: id, Args: args, Observers: o.observers, ArgumentsStreamed: o.streamed}
	if t != nil {
		info.ToolVersion = t.Desc.Version
		if tr := h.tracing.Tracer(); tr != nil {
			info.TraceID, info.SpanID = h.startSpan(ctx, tr, info.ID, t, o)
		}
	}
	rec, err := h.rec.Begin(ctx, info)
	if o.span != nil && err != nil {
		endSpanRefused(o.span, err)
	}
	if errors.Is(err, recorder.ErrClosed) {
		return nil, ErrClosed
	}
	return rec, err
}

// refuse ends rec as refused before it reached a child and returns the
// caller's error: a *RefusedError for err, joined with the journal's when
// a required journal did not confirm the refusal.
func (h *Host) refuse(ctx context.Context, rec *recorder.Record, class string, code frame.Code, err error) error {
	return endWith(ctx, rec, recorder.Refused(class, code, err), &RefusedError{Tree: rec.Tree(), err: err})
}

// endWith ends rec with o and returns err, joined with the journal's
// error when a required journal did not confirm the end.
func endWith(ctx context.Context, rec *recorder.Record, o calllog.Outcome, err error) error {
	var je *calllog.JournalError
	if jerr := rec.End(ctx, o); errors.As(jerr, &je) {
		return errors.Join(err, jerr)
	}
	return err
}

// checkInput validates the payloads of WithInput against t's input_schema;
// a tool whose chunks carry media (input_media) takes none of them, since
// WithInput sends payloads only.
func checkInput(t *toolschema.Tool, input []frame.Payload) error {
	if len(input) > 0 && t.Desc.InputMedia {
		return errNoMedia()
	}
	for _, p := range input {
		if p == nil || protocol.CheckPayload(p) != nil {
			return &SchemaError{Schema: "input", Value: "not a JSON object"}
		}
		if err := validate(t.Input, p); err != nil {
			return err
		}
	}
	return nil
}

// dispatch sends a recorded, validated call of t to a child.
func (h *Host) dispatch(ctx context.Context, rec *recorder.Record, t *toolschema.Tool, args frame.Payload, o *callOptions) (*Call, error) {
	if err := checkInput(t, o.input); err != nil {
		return nil, h.refuse(ctx, rec, "schema", frame.CodeInvalidFrame, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, endWith(ctx, rec, recorder.Cancelled("context done before the call was sent"), err)
	}
	for {
		c, err := h.startCall(ctx, rec, t, args, o)
		if !errors.Is(err, errRetry) {
			if err != nil && o.span != nil {
				endSpanRefused(o.span, err)
			}
			return c, err
		}
	}
}

// startCall takes a slot and starts the call on its child; errRetry means
// the child turned out dead before the invoke and another may be tried
// (nothing was recorded: no attempt was made).
func (h *Host) startCall(ctx context.Context, rec *recorder.Record, t *toolschema.Tool, args frame.Payload, o *callOptions) (*Call, error) {
	ch, err := h.acquire(ctx)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, endWith(ctx, rec, recorder.Cancelled("context done while waiting for a stream slot"), err)
		case errors.Is(err, ErrClosed):
			return nil, h.refuse(ctx, rec, "host_closed", frame.CodeUnreachable, err)
		default:
			return nil, h.refuse(ctx, rec, "pool_down", frame.CodeUnreachable, err)
		}
	}
	inv := &wire.Invoke{CallID: rec.ID(), ToolID: t.Desc.ID, Arguments: args, Trace: o.trace}
	if p := rec.Parent(); p != nil {
		inv.Tree, inv.Parent = rec.Tree(), p.ID()
		inv.Depth = int64(depthOf(rec))
	}
	if dl, ok := ctx.Deadline(); ok {
		inv.TimeoutMS = max(1, time.Until(dl).Milliseconds())
	}
	if err := checkLinks(inv); err != nil {
		ch.releaseSlot(nil)
		ch.wg.Done()
		return nil, h.refuse(ctx, rec, "invalid", frame.CodeInvalidFrame, fmt.Errorf("host: invoke: %w", err))
	}
	if err := requestFits(inv, o, ch.limits); err != nil {
		ch.releaseSlot(nil)
		ch.wg.Done()
		return nil, h.refuse(ctx, rec, "limits", frame.CodeInvalidFrame, err)
	}
	// The tool the child knows is the one the host validated against,
	// unless the child was restarted with another build or changed its
	// tools since: use its own.
	h.mu.Lock()
	cat := ch.cat
	h.mu.Unlock()
	if ct := cat.Tool(t.Desc.ID); ct != nil {
		t = ct
	}
	var reqArgs frame.Payload
	if o.streamed {
		reqArgs = args // the started event had none
	}
	return ch.startCall(ctx, t, inv, rec, reqArgs, o)
}

// Program runs fn as a program named name: a call in the log whose calls —
// made with the context fn is given — are its steps, in one tree (one
// journal, numbered once). The program ends after fn has returned and
// every step has ended: done when fn returned nil, else with fn's error.
// It returns fn's error, or the recorder's (a required journal that did
// not keep the start or confirm the end). When
// fn returned nil but ctx was done before every step ended, it returns an
// error matching ctx's error (context.Canceled or
// context.DeadlineExceeded); the program then ends cancelled when its last
// step does.
// Programs nest: a program run with a program's context is its step.
func (h *Host) Program(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...CallOption) error {
	o := gatherOptions(opts)
	err := h.rec.Program(ctx, recorder.CallInfo{ID: h.newCallID(), Tool: name, Observers: o.observers}, fn)
	if errors.Is(err, recorder.ErrClosed) {
		return errors.Join(ErrClosed, err)
	}
	return err
}

// Detached returns a context whose calls are trees of their own, for work
// meant to outlive the running call (program) of ctx. Observer marks are
// kept: a call an observer makes is still not given to that observer.
func Detached(ctx context.Context) context.Context { return recorder.Detached(ctx) }

// FlushObservers waits until every observer (the host's, a program's, a call's)
// has been given every event queued for it when FlushObservers was called, or ctx
// is done (its error).
func (h *Host) FlushObservers(ctx context.Context) error { return h.rec.Drain(ctx) }

// Close shuts the host down: it refuses new calls, drains every child
// (drain, then bye and exit within Config.DrainGrace, shortened to fit
// ctx's deadline), then sends SIGTERM and, after Config.KillGrace, SIGKILL
// to whatever is left; it reaps every process, removes the private
// directories and waits for every goroutine. Calls still running when
// their child exits get a synthetic unreachable.
//
// The call log's journal is then given until ctx is done (10 s when ctx
// has no deadline) to keep what is queued; events it could not keep by
// then are dropped and counted.
//
// Close is idempotent and safe to call concurrently: later calls wait for
// the first and return its result. It returns the first error met, such
// as a child that had to be killed, one matching calllog.ErrCloseDropped
// (saying how many) when journal events were not kept, or one matching
// ctx's error when ctx was done and the call log's goroutines had still
// not returned a second later (an observer or store that ignores its
// context).
func (h *Host) Close(ctx context.Context) error {
	h.closeOnce.Do(func() {
		h.mu.Lock()
		h.closing = true
		h.closeCtx = ctx
		h.notifyLocked()
		h.mu.Unlock()
		h.stop()
		h.wg.Wait()
		h.contain.Close() // every child was reaped
		var errs []error
		h.mu.Lock()
		for _, s := range h.slots {
			if s.closeErr != nil {
				errs = append(errs, s.closeErr)
			}
		}
		h.mu.Unlock()
		// Every call has its end recorded (its child is gone): what is
		// left is the observers' and the journal's queues.
		if err := h.rec.Close(ctx); err != nil {
			errs = append(errs, err)
		}
		if len(errs) > 0 {
			h.closeErr = errs[0]
		}
	})
	return h.closeErr
}

var (
	errNoChild = errors.New("host: child not ready")
	errRetry   = errors.New("host: child gone before the invoke")
)

// requestFits returns an error matching wire.ErrTooLarge when the
// invoke, or a chunk of a WithInput request, would be over the child's
// max_header: such a call is refused before anything reaches the child
// (docs/protocol.md §7, "Refused calls"), where writing it would fail with
// nothing sent. A request far below the limit is not encoded for this: the
// sizes of its variable parts bound its packets' (perPacketSlack covers
// the keys, the fixed fields and msgpack's prefixes).
func requestFits(inv *wire.Invoke, o *callOptions, l wire.Limits) error {
	limit := int(packetio.Effective(l).MaxHeader)
	size := len(inv.Arguments) + len(inv.CallID) + len(inv.ToolID) + len(inv.Tree) + len(inv.Parent)
	for k, v := range inv.Trace {
		size += len(k) + len(v) + 10
	}
	if !surelyFits(size, limit) {
		if _, err := packetio.Encode(inv, l); err != nil {
			return fmt.Errorf("host: invoke: %w", err)
		}
	}
	for i, p := range o.input {
		if surelyFits(len(p)+len(inv.CallID), limit) {
			continue // the common case: no chunk is built (and validated) twice
		}
		f, err := frame.NewChunk(inv.CallID, frame.CallerToProvider, uint64(i+1), p, nil)
		if err == nil {
			err = frameFits(&f, l)
		}
		if err != nil {
			return fmt.Errorf("host: input chunk %d: %w", i+1, err)
		}
	}
	return nil
}

// checkLinks checks the tree and parent ids of inv, the fields of an
// invoke that come from the running call of the caller's context (a
// child's call, a remote caller's) rather than from the host or from what
// it checked already (the call id it made, the tool id of the child's
// hello, the arguments): each must follow the call id's rule (1 to 128
// characters of valid UTF-8), and the error is a *frame.FieldError naming
// it. The writer checks the whole invoke again (wire.AppendPacket).
func checkLinks(inv *wire.Invoke) error {
	for _, id := range [...]struct{ field, v string }{{"tree", inv.Tree}, {"parent", inv.Parent}} {
		if id.v == "" {
			continue
		}
		if err := protocol.CheckCallID(id.v); err != nil {
			var fe *frame.FieldError
			if errors.As(err, &fe) {
				return &frame.FieldError{Field: id.field, Reason: fe.Reason}
			}
			return err
		}
	}
	return nil
}

// frameFits returns an error matching wire.ErrTooLarge when f's header
// would be over l's max_header (see requestFits); an attachment is not
// counted here (the Writer checks it against max_attachment).
func frameFits(f *frame.Frame, l wire.Limits) error {
	if surelyFits(len(f.Payload)+len(f.CallID), int(packetio.Effective(l).MaxHeader)) {
		return nil
	}
	_, _, err := wire.AppendPacket(nil, &wire.Frame{Frame: *f}, l)
	return err
}

// surelyFits reports whether a packet whose variable parts (payloads,
// ids) total n bytes is within a max_header of limit, without encoding it.
func surelyFits(n, limit int) bool { return n+perPacketSlack <= limit }

// perPacketSlack bounds what an invoke or a chunk frame adds to the sizes
// of its variable parts when encoded: its keys and fixed values (about
// 100 bytes) and the length prefixes of its strings.
const perPacketSlack = 256
