package host

import (
	"context"
	"errors"
	"iter"
	"sync"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/internal/toolschema"
	"github.com/skulkrt/skulk/wire"
)

// HostTool is a tool the host runs itself, in Go, for its children: the
// analogue of a child's tool, with the same descriptor and schemas, that
// a provider's handler calls through its host (docs/protocol.md §8).
type HostTool struct {
	// Tool describes the tool as a child's hello would: its id, version,
	// description and schemas. The arguments are checked against
	// ArgumentsSchema (defaults filled in) and each input chunk against
	// InputSchema before Run sees them; each chunk Run sends is checked
	// against OutputSchema and the result against ResultSchema.
	Tool wire.Tool
	// Run runs one call. ctx ends when the call is cancelled (the calling
	// handler cancelled it, or its own call ended) or its deadline
	// passes; calls Run makes with ctx (Host.Call, Host.Program) are steps
	// of this call, in its tree. Its result is the completed terminal's
	// payload (nil for none); an error fails the call with
	// provider_error, its message sanitized. Run must return once ctx is
	// done; it may not keep c after it returned. Runs of one tool may be
	// concurrent.
	Run func(ctx context.Context, c *ToolCall) (frame.Payload, error)
}

// hostToolList returns the descriptors of tools.
func hostToolList(tools []HostTool) []wire.Tool {
	list := make([]wire.Tool, len(tools))
	for i, t := range tools {
		list[i] = t.Tool
	}
	return list
}

// ToolCall is a host tool's view of one call a child made. Its methods
// may be used from one goroutine at a time, until Run returns.
type ToolCall struct {
	// ID is the call's id in the call log.
	ID string
	// Tree is the id of its call tree (the outermost call's).
	Tree string
	// Parent is the id of the call whose handler made this call; empty
	// for a detached call.
	Parent string
	// ParentTree is the tree of Parent: Tree itself, unless the call is
	// detached. A bridge uses it to find the client whose call this is.
	ParentTree string
	// Child is the id of the child whose handler made the call.
	Child string
	// Arguments are the call's checked arguments, a JSON object.
	Arguments frame.Payload

	tool *toolschema.Tool
	in   chan frame.Frame // caller chunks; closed once the caller closed its direction; bounded by protocol.IngressQueue
	send func(ctx context.Context, f frame.Frame) error
	seq  uint64
	stop <-chan struct{} // Run's ctx.Done()
}

// InputFrames returns the caller's chunks in order. It ends when the caller
// closes its direction or ctx of Run is done.
func (c *ToolCall) InputFrames() iter.Seq[frame.Frame] {
	return func(yield func(frame.Frame) bool) {
		for {
			select {
			case f, ok := <-c.in:
				if !ok || !yield(f) {
					return
				}
			case <-c.stop:
				return
			}
		}
	}
}

// Send sends one chunk to the caller: a payload, media, or both. The
// payload is checked against the tool's output_schema first (a
// *SchemaError, nothing sent). It blocks while the caller does not read
// (backpressure) and returns ctx's error once ctx is done.
func (c *ToolCall) Send(ctx context.Context, payload frame.Payload, media frame.Media) error {
	if payload != nil {
		if err := protocol.CheckPayload(payload); err != nil {
			return err
		}
		if err := validate(c.tool.Output, payload); err != nil {
			return err
		}
	}
	c.seq++
	f, err := frame.NewChunk(c.ID, frame.ProviderToCaller, c.seq, payload, media)
	if err != nil {
		c.seq--
		return err
	}
	return c.send(ctx, f)
}

// hostCallee runs a HostTool for one nested call: the callee of a call
// connection (see nestedCallee). The handler's goroutine writes its
// frames to the call connection itself (emit), the terminal last: no
// goroutine stands between the handler and the caller.
type hostCallee struct {
	tc     *ToolCall
	t      *HostTool
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when the handler's goroutine returned
	once   sync.Once
}

// newHostCallee prepares t's handler for one call under ctx, which cancel
// ends (the call's own context: its abort is cancel); start runs it.
func newHostCallee(ctx context.Context, cancel context.CancelFunc, t *HostTool, ts *toolschema.Tool, tc *ToolCall) *hostCallee {
	hc := &hostCallee{tc: tc, t: t, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	tc.tool = ts
	tc.stop = ctx.Done()
	tc.in = make(chan frame.Frame, protocol.IngressQueue)
	return hc
}

// start runs the handler on its own goroutine (stopped by ctx's end or
// its return; waited for through done). emit writes each frame the
// handler sends, then the terminal; a frame waits for room in the
// connection's queue until its sender's context or the call's ends.
func (hc *hostCallee) start(emit func(ctx context.Context, f frame.Frame) error) {
	go hc.runHere(emit) // stopped by the handler's return; the terminal is always emitted
}

// runHere is start on the calling goroutine: it returns once the terminal
// was emitted.
func (hc *hostCallee) runHere(emit func(ctx context.Context, f frame.Frame) error) {
	hc.prepare(emit)
	defer close(hc.done)
	defer hc.cancel()
	emit(context.Background(), hc.run(hc.ctx, hc.t))
}

// prepare makes the handler's Send emit its frames.
func (hc *hostCallee) prepare(emit func(ctx context.Context, f frame.Frame) error) {
	hc.tc.send = func(sctx context.Context, f frame.Frame) error {
		if err := hc.ctx.Err(); err != nil {
			return err
		}
		switch {
		case sctx.Done() == nil:
			sctx = hc.ctx
		case sctx != hc.ctx:
			// A context of the handler's own: the call's end ends the
			// wait too (Run's ctx, and those derived from it, already do).
			var cancel context.CancelFunc
			sctx, cancel = context.WithCancel(sctx)
			defer cancel()
			defer context.AfterFunc(hc.ctx, cancel)()
		}
		return emit(sctx, f)
	}
}

// run calls the handler and returns the call's terminal.
func (hc *hostCallee) run(ctx context.Context, t *HostTool) (term frame.Frame) {
	seq := func() uint64 { return hc.tc.seq + 1 }
	defer func() {
		if p := recover(); p != nil {
			term, _ = frame.NewFailed(hc.tc.ID, frame.ProviderToCaller, seq(), frame.CodeProviderError, "host tool panicked")
		}
	}()
	res, err := t.Run(ctx, hc.tc)
	switch {
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), context.DeadlineExceeded):
		term, _ = frame.NewFailed(hc.tc.ID, frame.ProviderToCaller, seq(), frame.CodeTimeout, "deadline passed")
	case ctx.Err() != nil:
		term, _ = frame.NewCancelled(hc.tc.ID, frame.ProviderToCaller, seq(), "cancelled")
	case err != nil:
		term, _ = frame.NewFailed(hc.tc.ID, frame.ProviderToCaller, seq(), frame.CodeProviderError, err.Error())
	default:
		if res != nil {
			if verr := validate(hc.tc.tool.Result, res); verr != nil {
				term, _ = frame.NewFailed(hc.tc.ID, frame.ProviderToCaller, seq(), frame.CodeProviderError, verr.Error())
				return term
			}
		}
		term, _ = frame.NewCompleted(hc.tc.ID, frame.ProviderToCaller, seq(), res)
	}
	return term
}

func (hc *hostCallee) send(ctx context.Context, f frame.Frame) error {
	if f.Payload != nil {
		if err := validate(hc.tc.tool.Input, f.Payload); err != nil {
			return err
		}
	}
	select {
	case hc.tc.in <- f:
		return nil
	case <-hc.done:
		return ErrSendClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (hc *hostCallee) closeSend() { hc.once.Do(func() { close(hc.tc.in) }) }

func (hc *hostCallee) abort() { hc.cancel() }
