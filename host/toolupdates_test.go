package host

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/testnet"
	"github.com/skulkrt/skulk/wire"
	"github.com/stretchr/testify/require"
)

// toolIDs returns the ids of h's catalogue, sorted.
func toolIDs(h *Host) []string {
	var ids []string
	for _, t := range h.Tools() {
		ids = append(ids, t.ID)
	}
	slices.Sort(ids)
	return ids
}

// TestToolListChangedByRunningChild: a real child (child/internal/retoolchild)
// replaces its tools while it runs. The host learns of it (ToolsChanged),
// checks new calls against the new list, and a call in flight of a tool
// the list drops runs to its end.
func TestToolListChangedByRunningChild(t *testing.T) {
	bin, err := testnet.Build(t.TempDir(), "github.com/skulkrt/skulk/child/internal/retoolchild")
	require.NoError(t, err)
	h, logs := testHost(t, Config{Command: bin}, time.Minute)
	ctx := callCtx(t, 30*time.Second)
	require.Contains(t, toolIDs(h), "upper")

	// A call running in the child when the list changes: its first chunk
	// has come back.
	inflight, err := h.Call(ctx, "echo", nil)
	require.NoError(t, err)
	require.NoError(t, inflight.Send(ctx, frame.MustPayload(map[string]any{"k": 0}), nil))
	for {
		f, err := inflight.Recv(ctx)
		require.NoError(t, err)
		if f.Kind == frame.KindChunk {
			break
		}
	}

	changed := h.ToolsChanged()
	rc, err := h.Call(ctx, "retool", frame.MustPayload(map[string]any{"keep": []string{"count"}, "alias": "echo2"}))
	require.NoError(t, err)
	require.NoError(t, rc.CloseSend())
	res, err := rc.Wait()
	require.NoError(t, err)
	var out struct {
		Tools int `json:"tools"`
	}
	require.NoError(t, res.Decode(&out))
	require.Equal(t, 3, out.Tools)
	select {
	case <-changed:
	case <-ctx.Done():
		require.FailNow(t, fmt.Sprintf("ToolsChanged not closed; logs:\n%s", logs))
	}
	require.Equal(t, []string{"count", "echo2", "retool"}, toolIDs(h))
	require.NotEqual(t, changed, h.ToolsChanged(), "a closed channel is not handed out again")

	_, err = h.Call(ctx, "upper", nil)
	require.ErrorIs(t, err, ErrUnknownTool)

	c, err := h.Call(ctx, "echo2", nil)
	require.NoError(t, err)
	require.NoError(t, c.Send(ctx, frame.MustPayload(map[string]any{"k": 1}), nil))
	require.NoError(t, c.CloseSend())
	fs := collect(t, c)
	require.Equal(t, frame.KindCompleted, fs[len(fs)-1].Kind)
	require.False(t, fs[len(fs)-1].Synthetic)

	// The call started before the change keeps its tool, though the new
	// list drops it.
	require.NoError(t, inflight.Send(ctx, frame.MustPayload(map[string]any{"k": 1}), nil))
	require.NoError(t, inflight.CloseSend())
	var last frame.Frame
	for f, err := range inflight.Frames() {
		require.NoError(t, err)
		last = f
	}
	require.Equal(t, frame.KindCompleted, last.Kind)
	require.False(t, last.Synthetic)
	var echoed struct {
		Chunks int `json:"chunks"`
	}
	require.NoError(t, last.Payload.Decode(&echoed))
	require.Equal(t, 2, echoed.Chunks)

	info := h.Children()
	require.Len(t, info, 1)
	require.Equal(t, "ready", info[0].State)
	require.Zero(t, info[0].Restarts)
	require.Contains(t, logs.String(), "child tools changed")
}

// TestToolListRefused: a tools packet the host cannot take (two tools of
// one id) is a protocol error: the host ends that child and names the
// cause, as it refuses such a hello.
func TestToolListRefused(t *testing.T) {
	h, _ := testHost(t, fastHealth(fakeConfig("badtools")), time.Minute)
	deadline := time.Now().Add(20 * time.Second)
	for {
		info := h.Children()[0]
		if info.LastCause != nil {
			require.ErrorIs(t, info.LastCause, wire.ErrProtocol)
			require.ErrorIs(t, info.LastCause, ErrChildDied)
			require.Contains(t, info.LastCause.Error(), "tools")
			return
		}
		require.True(t, time.Now().Before(deadline), "the child was not ended")
		time.Sleep(20 * time.Millisecond)
	}
}
