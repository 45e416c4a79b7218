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

// fakeHost plays a serving host of the name "fake" by hand: its tool list
// comes from a real serving host (of the name "tools"), and each call's
// open is handed to the test on the returned channel, to be answered by
// publishing on its reply subject. The channel holds 8 opens (a test
// waits for each open it makes); the client dials "fake".
func fakeHost(t *testing.T) (*nats.Conn, *remote.Client, <-chan *nats.Msg) {
	t.Helper()
	srv := natstest.Run(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	startServing(t, exe, []string{srv.URL()}, "real", t.TempDir())
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	tools, err := nc.Subscribe("skulk.fake.tools", func(m *nats.Msg) {
		answer, err := nc.Request("skulk.tools.tools", nil, 10*time.Second)
		if err == nil {
			_ = m.Respond(answer.Data)
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tools.Unsubscribe() })
	opens := make(chan *nats.Msg, 8)
	calls, err := nc.Subscribe("skulk.fake.call", func(m *nats.Msg) { opens <- m })
	require.NoError(t, err)
	t.Cleanup(func() { _ = calls.Unsubscribe() })
	cl, err := remote.Dial(nc, "fake", testOptions)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	return nc, cl, opens
}

// fakeAccept is the fake host's accept: its subject for the call is
// skulk.fake.h.x.y.
var fakeAccept = message.Message{Kind: message.KindAccept, Arg: remote.DefaultWindow, Body: []byte("skulk.fake.h.x.y")}

// openedInvoke returns the invoke an open carries.
func openedInvoke(t *testing.T, open *nats.Msg) *wire.Invoke {
	t.Helper()
	m, err := message.Parse(open.Data)
	require.NoError(t, err)
	p, err := packetio.NewReader(bytes.NewReader(m.Body), packetio.DefaultLimits()).ReadPacket()
	require.NoError(t, err)
	inv, ok := p.(*wire.Invoke)
	require.True(t, ok, "the open's first packet is %T", p)
	return inv
}

// streamBytes encodes packets as a serving host's stream carries them.
func streamBytes(t *testing.T, pkts ...wire.Packet) []byte {
	t.Helper()
	var b []byte
	for _, p := range pkts {
		hdr, att, err := wire.AppendPacket(nil, p, packetio.DefaultLimits())
		require.NoError(t, err)
		b = append(append(b, hdr...), att...)
	}
	return b
}

// publishAll publishes msgs on subj, in order.
func publishAll(t *testing.T, nc *nats.Conn, subj string, msgs ...message.Message) {
	t.Helper()
	for _, m := range msgs {
		require.NoError(t, nc.Publish(subj, message.Append(nil, m)))
	}
}

// ping publishes a ping on subj four times a heartbeat interval, the
// first numbered seq, as a live serving host does, until the returned stop
// is called; stop returns the next message number.
func ping(nc *nats.Conn, subj string, seq uint64) (stop func() uint64) {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() { // stopped by stop
		defer close(done)
		tk := time.NewTicker(testOptions.HeartbeatInterval / 4)
		defer tk.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tk.C:
				_ = nc.Publish(subj, message.Append(nil, message.Message{Kind: message.KindPing, Seq: seq}))
				seq++
			}
		}
	}()
	return func() uint64 {
		close(quit)
		<-done
		return seq
	}
}

// A serving host that breaks the sequence fence gets the caller a
// synthetic invalid_frame at the next sequence number: a terminal never
// repeats the sequence of a frame the caller already got.
func TestForgedFrameTerminalSequence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc, cl, opens := fakeHost(t)

	c, err := cl.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 0}))
	require.NoError(t, err)
	// The fake host accepts, then sends a chunk with sequence 5 where 1
	// is due.
	open := <-opens
	f, err := frame.NewChunk(openedInvoke(t, open).CallID, frame.ProviderToCaller, 5, frame.MustPayload(map[string]any{"n": 1}), nil)
	require.NoError(t, err)
	publishAll(t, nc, open.Reply, fakeAccept, message.Message{Kind: message.KindData, Seq: 1, Body: streamBytes(t, &wire.Frame{Frame: f})})

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

// A serving host that sends its terminal and end, then keeps pinging
// without the fin, cannot hold the call: the caller gives the terminal
// as it came (not marked synthetic: no fin said so) within the heartbeat
// timeout of it, and tells the host with an abort invalid_frame.
func TestNoFinAfterTerminal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc, cl, opens := fakeHost(t)
	aborts := make(chan message.Message, 1) // the one abort the caller sends
	sub, err := nc.Subscribe(string(fakeAccept.Body), func(m *nats.Msg) {
		if msg, err := message.Parse(m.Data); err == nil && msg.Kind == message.KindAbort {
			msg.Body = bytes.Clone(msg.Body)
			aborts <- msg
		}
	})
	require.NoError(t, err)
	defer sub.Unsubscribe()

	c, err := cl.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 0}))
	require.NoError(t, err)
	open := <-opens
	done, err := frame.NewCompleted(openedInvoke(t, open).CallID, frame.ProviderToCaller, 1, frame.MustPayload(map[string]any{"ok": true}))
	require.NoError(t, err)
	publishAll(t, nc, open.Reply, fakeAccept, message.Message{Kind: message.KindData, Seq: 1,
		Body: streamBytes(t, &wire.Frame{Frame: done}, &wire.End{CallID: done.CallID})})
	sent := time.Now()

	defer ping(nc, open.Reply, 2)()

	term := terminal(t, c, testOptions.HeartbeatTimeout+margin)
	took := time.Since(sent)
	require.Equal(t, frame.KindCompleted, term.Kind, "%+v", term)
	assert.False(t, term.Synthetic, "no fin said the terminal was made up")
	got, err := term.Payload.Map()
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"ok": true}, got)
	assert.GreaterOrEqual(t, took, testOptions.HeartbeatTimeout-100*time.Millisecond, "the caller waited for the fin")
	select {
	case a := <-aborts:
		assert.Equal(t, uint64(frame.CodeInvalidFrame), a.Arg)
		assert.Contains(t, string(a.Body), "no fin")
	case <-time.After(margin):
		require.FailNow(t, "the serving host was not told")
	}
}

// A message that flows only from a caller (cancel), sent by a serving
// host, ends that call with a synthetic invalid_frame and an abort to the
// host; another call of the same client (kept alive by pings meanwhile)
// goes on to its own terminal.
func TestWrongWayFromServingHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc, cl, opens := fakeHost(t)

	good, err := cl.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 0}))
	require.NoError(t, err)
	goodOpen := <-opens
	publishAll(t, nc, goodOpen.Reply, fakeAccept)
	stopPing := ping(nc, goodOpen.Reply, 1)

	bad, err := cl.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 0}))
	require.NoError(t, err)
	publishAll(t, nc, (<-opens).Reply, fakeAccept, message.Message{Kind: message.KindCancel, Seq: 1})
	term := terminal(t, bad, 10*time.Second)
	require.Equal(t, frame.KindFailed, term.Kind, "%+v", term)
	assert.Equal(t, frame.CodeInvalidFrame, term.Error.Code)
	assert.Contains(t, term.Error.Message, "only the other way")
	assert.True(t, term.Synthetic)

	done, err := frame.NewCompleted(openedInvoke(t, goodOpen).CallID, frame.ProviderToCaller, 1, nil)
	require.NoError(t, err)
	seq := stopPing()
	publishAll(t, nc, goodOpen.Reply, message.Message{Kind: message.KindData, Seq: seq, Body: streamBytes(t, &wire.Frame{Frame: done}, &wire.End{CallID: done.CallID})},
		message.Message{Kind: message.KindFin, Seq: seq + 1})
	term = terminal(t, good, 10*time.Second)
	assert.Equal(t, frame.KindCompleted, term.Kind, "%+v", term)
	assert.False(t, term.Synthetic)
}

// A message that flows only from a serving host (fin, tree), sent by a
// caller, ends that call at the serving host: the caller is answered
// with an abort invalid_frame, and another call to the same host goes on.
func TestWrongWayToServingHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc, _, _ := fakeHost(t) // its nc reaches the real serving host of "tools"
	cl, err := remote.Dial(nc, "tools", testOptions)
	require.NoError(t, err)
	defer cl.Close()
	good, err := cl.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 300}))
	require.NoError(t, err)

	for _, wrong := range []message.Message{
		{Kind: message.KindFin, Seq: 1},
		{Kind: message.KindTree, Seq: 1, Body: []byte("t-1")},
	} {
		reply := nc.NewInbox()
		in, err := nc.SubscribeSync(reply)
		require.NoError(t, err)
		st, err := frame.NewStarted("raw-1", frame.CallerToProvider)
		require.NoError(t, err)
		open := message.Message{Kind: message.KindOpen, Arg: remote.DefaultWindow, Body: streamBytes(t,
			&wire.Invoke{CallID: "raw-1", ToolID: "tick", Arguments: frame.MustPayload(map[string]any{"ms": 30000})}, &wire.Frame{Frame: st})}
		require.NoError(t, nc.PublishRequest("skulk.tools.call", reply, message.Append(nil, open)))
		next := func() message.Message {
			for {
				m, err := in.NextMsg(10 * time.Second)
				require.NoError(t, err, "%s", wrong.Kind)
				msg, err := message.Parse(m.Data)
				require.NoError(t, err)
				if msg.Kind == message.KindAccept || msg.Kind == message.KindAbort { // not the call's pings, tree and output
					return msg
				}
			}
		}
		accept := next()
		require.Equal(t, message.KindAccept, accept.Kind)
		publishAll(t, nc, string(accept.Body), wrong)
		abort := next()
		require.Equal(t, message.KindAbort, abort.Kind, "%s", wrong.Kind)
		assert.Equal(t, uint64(frame.CodeInvalidFrame), abort.Arg, "%s", wrong.Kind)
		assert.Contains(t, string(abort.Body), "only the other way", "%s", wrong.Kind)
		require.NoError(t, in.Unsubscribe())
	}
	_, err = good.Wait()
	assert.NoError(t, err, "the other call")
}
