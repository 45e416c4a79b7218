package child_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/skulktest"
	"github.com/skulkrt/skulk/wire"
	"github.com/stretchr/testify/require"
)

// sendTools hands tools to a child's Options.ToolUpdates, bounded by the
// test's deadline.
func sendTools(t *testing.T, ch chan<- []child.Tool, tools []child.Tool) {
	t.Helper()
	select {
	case ch <- tools:
	case <-ctxT(t).Done():
		require.FailNow(t, "the child took no tool list")
	}
}

// renamed returns a copy of the demo tool id under the id to.
func renamed(t *testing.T, id, to string) child.Tool {
	t.Helper()
	for _, tool := range demoOptions().Tools {
		if tool.ID == id {
			tool.ID, tool.Version = to, ""
			return tool
		}
	}
	require.FailNow(t, fmt.Sprintf("no demo tool %q", id))
	return child.Tool{}
}

// TestToolUpdates: a list sent on Options.ToolUpdates reaches a host that
// offered tools_updates as a tools packet; new calls find the new tools,
// and a dropped tool is unknown.
func TestToolUpdates(t *testing.T) {
	updates := make(chan []child.Tool)
	opts := demoOptions()
	opts.ToolUpdates = updates
	s := serveChild(t, config{}, opts)
	st := skulktest.DefaultStartup()
	st.ToolsUpdates = true
	_, err := s.host.Handshake(ctxT(t), st)
	require.NoError(t, err)

	sendTools(t, updates, []child.Tool{renamed(t, "echo", "echo2"), renamed(t, "count", "count")})
	p, err := s.host.Next(ctxT(t))
	require.NoError(t, err)
	list, ok := p.(*wire.Tools)
	require.True(t, ok, "got %T, want *wire.Tools", p)
	require.Len(t, list.Tools, 2)
	require.Equal(t, "echo2", list.Tools[0].ID)
	require.NotEmpty(t, list.Tools[0].Version, "a version is derived as for hello")
	require.Equal(t, "count", list.Tools[1].ID)

	c := dial(t, s.host)
	require.NoError(t, c.Request("e1", "echo2", nil, payload(map[string]any{"text": "hi"})))
	res := readCall(t, c, "e1")
	requireTerminal(t, res, frame.KindCompleted, 0)
	require.NotEmpty(t, res.Chunks)

	require.NoError(t, c.Invoke("u1", "upper", nil, 0))
	res = readCall(t, c, "u1")
	requireTerminal(t, res, frame.KindFailed, frame.CodeInvalidFrame)
	require.Contains(t, res.Terminal.Error.Message, "unknown tool")

	// A list Serve would refuse is dropped: no packet, the tools stay.
	sendTools(t, updates, []child.Tool{{ID: "nohandler"}})
	_, _, err = s.host.Ping(ctxT(t), 7)
	require.NoError(t, err)
	requireCountCompletes(t, dial(t, s.host), "n1")
}

// TestToolUpdatesNotOffered: without tools_updates in startup the child
// sends no tools packet and keeps its hello's tools.
func TestToolUpdatesNotOffered(t *testing.T) {
	updates := make(chan []child.Tool)
	opts := demoOptions()
	opts.ToolUpdates = updates
	s := serveChild(t, config{}, opts)
	_, err := s.host.Handshake(ctxT(t), nil)
	require.NoError(t, err)

	sendTools(t, updates, []child.Tool{renamed(t, "echo", "echo2")})
	_, _, err = s.host.Ping(ctxT(t), 9)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(ctxT(t), 200*time.Millisecond)
	defer cancel()
	p, err := s.host.Next(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded, "unexpected %T", p)

	c := dial(t, s.host)
	require.NoError(t, c.Request("e1", "echo2", nil))
	res := readCall(t, c, "e1")
	requireTerminal(t, res, frame.KindFailed, frame.CodeInvalidFrame)
	require.Contains(t, res.Terminal.Error.Message, "unknown tool")
	requireCountCompletes(t, dial(t, s.host), "n1")
}
