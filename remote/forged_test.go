package remote_test

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/natstest"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/remote"
	"github.com/skulkrt/skulk/remote/internal/message"
	"github.com/skulkrt/skulk/wire"
)

// A serving host that breaks the sequence fence gets the caller a
// synthetic invalid_frame at the next sequence number: a terminal never
// repeats the sequence of a frame the caller already got.
func TestForgedFrameTerminalSequence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := natstest.Run(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	startServing(t, exe, []string{srv.URL()}, "real", t.TempDir())
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	defer nc.Close()

	tools, err := nc.Subscribe("skulk.fake.tools", func(m *nats.Msg) {
		answer, err := nc.Request("skulk.tools.tools", nil, 10*time.Second)
		if err == nil {
			_ = m.Respond(answer.Data)
		}
	})
	require.NoError(t, err)
	defer tools.Unsubscribe()
	// The fake host accepts, then sends a chunk with sequence 5 where 1
	// is due.
	calls, err := nc.Subscribe("skulk.fake.call", func(m *nats.Msg) {
		open, err := message.Parse(m.Data)
		if err != nil {
			return
		}
		p, err := packetio.NewReader(bytes.NewReader(open.Body), packetio.DefaultLimits()).ReadPacket()
		inv, ok := p.(*wire.Invoke)
		if err != nil || !ok {
			return
		}
		f, err := frame.NewChunk(inv.CallID, frame.ProviderToCaller, 5, frame.MustPayload(map[string]any{"n": 1}), nil)
		if err != nil {
			return
		}
		hdr, _, err := wire.AppendPacket(nil, &wire.Frame{Frame: f}, packetio.DefaultLimits())
		if err != nil {
			return
		}
		_ = nc.Publish(m.Reply, message.Append(nil, message.Message{Kind: message.KindAccept, Arg: remote.DefaultWindow, Body: []byte("skulk.fake.h.x.y")}))
		_ = nc.Publish(m.Reply, message.Append(nil, message.Message{Kind: message.KindData, Seq: 1, Body: hdr}))
	})
	require.NoError(t, err)
	defer calls.Unsubscribe()
	cl, err := remote.Dial(nc, "fake", testOptions)
	require.NoError(t, err)
	defer cl.Close()

	c, err := cl.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 0}))
	require.NoError(t, err)
	st, err := c.Recv(ctx)
	require.NoError(t, err)
	require.Equal(t, frame.KindStarted, st.Kind)
	term := terminal(t, c, 10*time.Second)
	require.Equal(t, frame.KindFailed, term.Kind, "%+v", term)
	assert.Equal(t, frame.CodeInvalidFrame, term.Error.Code)
	assert.True(t, term.Synthetic)
	assert.Equal(t, uint64(1), term.Sequence, "the terminal follows the started (sequence 0)")
}

// A call whose deadline passes while its output waits for the caller's
// credit still gets the provider's terminal once the caller reads on: the
// serving host's writes are not cut short by the deadline the child
// enforces.
func TestDeadlineWhileOutputBlocked(t *testing.T) {
	srv := natstest.Run(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	startServing(t, exe, []string{srv.URL()}, "real", dir)
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	defer nc.Close()
	cl, err := remote.Dial(nc, "tools", testOptions)
	require.NoError(t, err)
	defer cl.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	c, err := cl.Call(ctx, "flood", frame.MustPayload(map[string]any{"size": 256 << 10, "marker": "dl"}))
	require.NoError(t, err)
	// Read nothing until the child saw its deadline.
	require.Eventually(t, func() bool { return readMarker(dir, "dl.end") != "" }, 10*time.Second, 20*time.Millisecond)
	term := terminal(t, c, 10*time.Second)
	require.Equal(t, frame.KindFailed, term.Kind, "%+v", term)
	assert.Equal(t, frame.CodeTimeout, term.Error.Code)
	assert.NotContains(t, term.Error.Message, "no terminal by the deadline", "the serving host's terminal, not the caller's backstop")
}
