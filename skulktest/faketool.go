package skulktest

import (
	"context"
	"slices"
	"sync"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/wire"
)

// FakeTool is a host-side tool with scripted answers, for a provider's
// tests of the calls its handlers make through the host
// (docs/protocol.md §8): offer it with host.Config.Calls.HostTools
// (HostTool), let the provider call it, then assert what it was given
// (Calls). Its fields are read when a call comes; set them before the
// host starts. Safe for concurrent calls.
//
//	lookup := &skulktest.FakeTool{Tool: wire.Tool{ID: "lookup"},
//		Result: frame.MustPayload(map[string]any{"len": 3})}
//	h := skulktest.StartProvider(t, opts, host.Config{Calls: host.Calls{HostTools: []host.HostTool{lookup.HostTool()}}})
//	... call the provider's tool ...
//	calls := lookup.Calls() // one FakeCall per call the provider made
type FakeTool struct {
	// Tool describes the tool, schemas included: the host checks the
	// provider's arguments and input against them.
	Tool wire.Tool
	// Chunks are sent, in order, before the call ends.
	Chunks []frame.Payload
	// Result is the completed terminal's payload (nil for none) when Err
	// is nil.
	Result frame.Payload
	// Err, when not nil, fails every call with provider_error and its text.
	Err error
	// ReadInput makes the tool read the caller's input to its end before
	// it answers; false answers at once.
	ReadInput bool

	mu    sync.Mutex
	calls []FakeCall
}

// FakeCall is one call a FakeTool was given.
type FakeCall struct {
	// ID, Tree, Parent and Child are the host.ToolCall's: the call's id in
	// the call log, its tree, the calling call and the calling child.
	ID, Tree, Parent, Child string
	// Arguments are the arguments the tool got (defaults filled in).
	Arguments frame.Payload
	// Input holds the caller's chunk payloads (ReadInput only).
	Input []frame.Payload
}

// HostTool returns the tool to put in host.Config.Calls.HostTools.
func (f *FakeTool) HostTool() host.HostTool {
	return host.HostTool{Tool: f.Tool, Run: f.run}
}

func (f *FakeTool) run(ctx context.Context, c *host.ToolCall) (frame.Payload, error) {
	fc := FakeCall{ID: c.ID, Tree: c.Tree, Parent: c.Parent, Child: c.Child, Arguments: c.Arguments}
	if f.ReadInput {
		for in := range c.InputFrames() {
			fc.Input = append(fc.Input, in.Payload)
		}
	}
	f.mu.Lock()
	f.calls = append(f.calls, fc)
	f.mu.Unlock()
	for _, p := range f.Chunks {
		if err := c.Send(ctx, p, nil); err != nil {
			return nil, err
		}
	}
	if f.Err != nil {
		return nil, f.Err
	}
	return f.Result, nil
}

// Calls returns the calls the tool was given so far, in the order they
// came.
func (f *FakeTool) Calls() []FakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}
