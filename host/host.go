package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skulkrt/skulk/frame"
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

	life context.Context // cancelled when Close begins: aborts starts and backoffs
	stop context.CancelFunc
	wg   sync.WaitGroup // one per slot supervisor

	slots []*slot

	mu       sync.Mutex // guards the fields below and the pool state of every slot and child
	closing  bool
	closeCtx context.Context // Close's context, set when closing
	changed  chan struct{}   // closed and replaced whenever the pool changes (a slot freed, a child up or down)
	cat      *catalog        // the catalogue of the latest child that started

	closeOnce sync.Once
	closed    chan struct{} // closed when Close has finished
	closeErr  error
}

// ChildState is the state of one slot of the pool.
type ChildState uint8

// Child states.
const (
	// StateStarting: the child is being started or restarted.
	StateStarting ChildState = iota + 1
	// StateReady: the child takes calls.
	StateReady
	// StateDraining: the child finishes its calls and takes no new ones
	// (Close, or a recycle because of stuck handlers).
	StateDraining
	// StateDead: the child died or was found unhealthy and is being
	// stopped; a restart follows unless the policy gives up.
	StateDead
	// StateDown: the restart policy gave up on this slot.
	StateDown
)

var stateNames = [...]string{StateStarting: "starting", StateReady: "ready", StateDraining: "draining", StateDead: "dead", StateDown: "down"}

// String returns the state's name, or "ChildState(n)" for an unknown value.
func (s ChildState) String() string {
	if s >= StateStarting && s <= StateDown {
		return stateNames[s]
	}
	return fmt.Sprintf("ChildState(%d)", uint8(s))
}

// ChildInfo describes one slot of the pool, as Children reports it.
type ChildInfo struct {
	// ID is the current child's id (SKULK_CHILD_ID); it changes with every
	// restart.
	ID string
	// PID is the current child's process id; 0 while none runs.
	PID int
	// State is the slot's state.
	State ChildState
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

// Start starts cfg.PoolSize children and completes each one's handshake
// (hello, then startup) before it returns. ctx bounds the start only; the
// Host lives until Close. On error every child started so far is stopped
// and nothing is left behind.
func Start(ctx context.Context, cfg Config) (*Host, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	h := &Host{
		cfg:      cfg.withDefaults(),
		idPrefix: hex.EncodeToString(rnd[:]),
		changed:  make(chan struct{}),
		closed:   make(chan struct{}),
	}
	h.log = h.cfg.Logger
	h.life, h.stop = context.WithCancel(context.Background())
	started := make([]*child, 0, h.cfg.PoolSize)
	for i := range h.cfg.PoolSize {
		s := &slot{index: i, state: StateStarting}
		h.slots = append(h.slots, s)
		ch, err := h.startChild(ctx, s)
		if err != nil {
			h.stop()
			for _, c := range started {
				c.stopNow(err)
			}
			return nil, err
		}
		started = append(started, ch)
	}
	for i, ch := range started {
		h.wg.Add(1)
		go h.supervise(h.slots[i], ch) // stopped by Close (h.life); Close waits through h.wg
	}
	return h, nil
}

// Tools returns the tool catalogue of the children: ids, descriptions and
// schemas. The slice is shared: do not modify it.
func (h *Host) Tools() []wire.Tool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cat.list
}

// Children describes every slot of the pool.
func (h *Host) Children() []ChildInfo {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]ChildInfo, len(h.slots))
	for i, s := range h.slots {
		info := ChildInfo{State: s.state, Restarts: s.restarts, LastCause: s.lastCause}
		if ch := s.cur; ch != nil {
			info.ID, info.PID, info.Running = ch.id, ch.proc.pid, ch.running
			info.MaxStreams, info.Streams, info.Stuck = ch.maxStreams, ch.streams, ch.stuck
		}
		out[i] = info
	}
	return out
}

// notifyLocked wakes every goroutine waiting for the pool to change. h.mu
// must be held.
func (h *Host) notifyLocked() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// acquire picks the least loaded ready child with a free stream slot and
// takes the slot, waiting while there is none. It also counts the call's
// watcher in the child's WaitGroup.
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
			if s.state != StateDown {
				allDown = false
			} else if cause == nil {
				cause = s.lastCause
			}
			ch := s.cur
			if ch == nil || s.state != StateReady || ch.state != StateReady || ch.running >= ch.maxStreams {
				continue
			}
			if best == nil || ch.running < best.running {
				best = ch
			}
		}
		if best != nil {
			best.running++
			best.wg.Add(1) // the call's watcher
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
	return fmt.Sprintf("%s-%d", h.idPrefix, h.nextCall.Add(1))
}

// CallOption sets optional fields of a call's invoke.
type CallOption func(*wire.Invoke)

// WithTrace attaches tracing context (W3C traceparent and the like) to the
// invoke. The map is not copied; do not modify it afterwards.
func WithTrace(trace map[string]string) CallOption {
	return func(inv *wire.Invoke) { inv.Trace = trace }
}

// WithParent places the call in a call tree: tree is the outermost call's
// id, parent the id of the call that makes this one.
func WithParent(tree, parent string) CallOption {
	return func(inv *wire.Invoke) { inv.Tree, inv.Parent = tree, parent }
}

// Call starts a call of tool with args (nil means no arguments) on the
// least loaded child, waiting for a free stream slot while every child is
// at its max_streams (bounded by ctx).
//
// Refusals come back at once and send nothing: ErrUnknownTool, a
// *SchemaError for arguments that break the tool's arguments_schema,
// ErrPoolDown, ErrClosed, or ctx's error while waiting for a slot. A child
// that dies just as the call starts gives a synthetic *CallError
// (unreachable or transport_error) instead of a Call. Arguments left out
// that have a "default" in the schema are filled in first, so the invoke
// carries the values the provider gets.
//
// ctx governs the whole call, as exec.CommandContext's does: its deadline
// becomes the invoke's timeout_ms, and cancelling it cancels the call. The
// returned Call must be read to its terminal (Recv, Frames or Wait):
// until then it holds a stream slot and the child's output waits for it.
func (h *Host) Call(ctx context.Context, tool string, args frame.Payload, opts ...CallOption) (*Call, error) {
	h.mu.Lock()
	closing, cat := h.closing, h.cat
	h.mu.Unlock()
	if closing {
		return nil, ErrClosed
	}
	t := cat.tools[tool]
	if t == nil {
		return nil, ErrUnknownTool
	}
	if args != nil {
		if err := args.Check(); err != nil {
			return nil, &SchemaError{Schema: "arguments", Value: "not a JSON object"}
		}
	}
	args, err := withDefaults(t.desc.ArgumentsSchema, args)
	if err != nil {
		return nil, err
	}
	if err := validate(t.arguments, "arguments", args); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for {
		c, err := h.startCall(ctx, tool, t, args, opts)
		if !errors.Is(err, errRetry) {
			return c, err
		}
	}
}

// startCall takes a slot and starts the call on its child; errRetry means
// the child turned out dead before the invoke and another may be tried.
func (h *Host) startCall(ctx context.Context, tool string, t *tool, args frame.Payload, opts []CallOption) (*Call, error) {
	ch, err := h.acquire(ctx)
	if err != nil {
		return nil, err
	}
	inv := &wire.Invoke{CallID: h.newCallID(), ToolID: tool, Arguments: args}
	for _, o := range opts {
		o(inv)
	}
	if dl, ok := ctx.Deadline(); ok {
		inv.TimeoutMS = max(1, time.Until(dl).Milliseconds())
	}
	if err := inv.Validate(); err != nil {
		ch.releaseSlot(nil)
		ch.wg.Done()
		return nil, fmt.Errorf("host: invoke: %w", err)
	}
	// The tool the child knows is the one the host validated against,
	// unless the child was restarted with another build: use its own.
	if ct := ch.cat.tools[tool]; ct != nil {
		t = ct
	}
	return ch.startCall(ctx, t, inv)
}

// Close shuts the host down: it refuses new calls, drains every child
// (drain, then bye and exit within Config.DrainGrace, shortened to fit
// ctx's deadline), then sends SIGTERM and, after Config.KillGrace, SIGKILL
// to whatever is left; it reaps every process, removes the private
// directories and waits for every goroutine. Calls still running when
// their child exits get a synthetic unreachable.
//
// Close is idempotent and safe to call concurrently: later calls wait for
// the first and return its result. It returns the first error met, such
// as a child that had to be killed.
func (h *Host) Close(ctx context.Context) error {
	h.closeOnce.Do(func() {
		h.mu.Lock()
		h.closing = true
		h.closeCtx = ctx
		h.notifyLocked()
		h.mu.Unlock()
		h.stop()
		h.wg.Wait()
		var errs []error
		h.mu.Lock()
		for _, s := range h.slots {
			if s.closeErr != nil {
				errs = append(errs, s.closeErr)
			}
		}
		h.mu.Unlock()
		if len(errs) > 0 {
			h.closeErr = errs[0]
		}
		close(h.closed)
	})
	<-h.closed
	return h.closeErr
}

var (
	errNoChild = errors.New("host: child not ready")
	errRetry   = errors.New("host: child gone before the invoke")
)
