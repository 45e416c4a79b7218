package skulktest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/skulktest"
	"github.com/skulkrt/skulk/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A provider's handler calls a host-side tool the test fakes, streaming
// it input with media and reading its chunks; the test asserts what the
// handler sent and got.
func TestFakeToolRecordsCalls(t *testing.T) {
	spell := &skulktest.FakeTool{
		Tool: wire.Tool{ID: "spell",
			ArgumentsSchema: map[string]any{"type": "object", "required": []any{"word"},
				"properties": map[string]any{"word": map[string]any{"type": "string"}}}},
		Chunks:    []frame.Payload{frame.MustPayload(map[string]any{"letter": "f"}), frame.MustPayload(map[string]any{"letter": "o"})},
		Result:    frame.MustPayload(map[string]any{"ok": true}),
		ReadInput: true,
	}
	opts := child.Options{Tools: []child.Tool{{
		ID: "ask",
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			c, err := s.Call(ctx, "spell", frame.MustPayload(map[string]any{"word": "fox"}))
			if err != nil {
				return nil, err
			}
			if err := c.Send(ctx, frame.MustPayload(map[string]any{"hint": "animal"}), &frame.InlineMedia{Data: []byte{1, 2, 3}, MediaType: "audio/pcm"}); err != nil {
				return nil, err
			}
			if err := c.CloseSend(); err != nil {
				return nil, err
			}
			n := 0
			for _, err := range c.Frames() {
				if err != nil {
					return nil, err
				}
				n++
			}
			res, err := c.Wait()
			if err != nil {
				return nil, err
			}
			var r struct{ OK bool }
			res.Decode(&r)
			return frame.MustPayload(map[string]any{"chunks": n, "ok": r.OK}), nil
		},
	}}}
	h := skulktest.StartProvider(t, opts, host.Config{Calls: host.Calls{HostTools: []host.HostTool{spell.HostTool()}}})
	c, err := h.Call(context.Background(), "ask", nil)
	require.NoError(t, err)
	out := skulktest.Collect(t, c)
	require.Nil(t, out.CallError())
	skulktest.JSONEqual(t, out.Result, `{"chunks": 2, "ok": true}`)

	calls := spell.Calls()
	require.Len(t, calls, 1)
	assert.Equal(t, c.ID(), calls[0].Parent)
	assert.Equal(t, c.Tree(), calls[0].Tree)
	skulktest.JSONEqual(t, calls[0].Arguments, `{"word": "fox"}`)
	require.Len(t, calls[0].Input, 1)
	skulktest.JSONEqual(t, calls[0].Input[0], `{"hint": "animal"}`)
}

// A provider whose handler calls a tool the host does not offer gets
// child.ErrNotOffered, and with no offer at all child.ErrCallsOff.
func TestFakeToolNotOffered(t *testing.T) {
	errs := make(chan error, 2) // one per call below
	opts := child.Options{Tools: []child.Tool{{
		ID: "ask",
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			_, err := s.Call(ctx, "other", nil)
			errs <- err
			return nil, nil
		},
	}}}
	spell := &skulktest.FakeTool{Tool: wire.Tool{ID: "spell"}}
	for _, cfg := range []host.Config{{}, {Calls: host.Calls{HostTools: []host.HostTool{spell.HostTool()}}}} {
		h := skulktest.StartProvider(t, opts, cfg)
		c, err := h.Call(context.Background(), "ask", nil)
		require.NoError(t, err)
		_, err = c.Wait()
		require.NoError(t, err)
	}
	got := []error{<-errs, <-errs}
	assert.True(t, errors.Is(got[0], child.ErrCallsOff), "%v", got[0])
	assert.True(t, errors.Is(got[1], child.ErrNotOffered), "%v", got[1])
	assert.Empty(t, spell.Calls())
}

// A detached call is a tree of its own, with no parent, and outlives the
// handler's call.
func TestFakeToolDetached(t *testing.T) {
	spell := &skulktest.FakeTool{Tool: wire.Tool{ID: "spell"}}
	opts := child.Options{Tools: []child.Tool{{
		ID: "ask",
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			c, err := s.Call(child.Detached(ctx), "spell", nil)
			if err != nil {
				return nil, err
			}
			return c.Wait()
		},
	}}}
	h := skulktest.StartProvider(t, opts, host.Config{Calls: host.Calls{HostTools: []host.HostTool{spell.HostTool()}}})
	c, err := h.Call(context.Background(), "ask", nil)
	require.NoError(t, err)
	_, err = c.Wait()
	require.NoError(t, err)
	calls := spell.Calls()
	require.Len(t, calls, 1)
	assert.Empty(t, calls[0].Parent)
	assert.Equal(t, calls[0].ID, calls[0].Tree, "its own tree")
	assert.NotEqual(t, c.Tree(), calls[0].Tree)
}
