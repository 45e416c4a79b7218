package host

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/coalesce"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/recorder"
	"github.com/skulkrt/skulk/internal/toolschema"
	"github.com/skulkrt/skulk/wire"
)

// TestCallOutChunkCutShortKeepsTheTerminal: a chunk whose wait for room on
// a call connection ends with its sender's context (a host tool's Send
// while the calling child does not read) is not written, and the call
// still gets its terminal, numbered right after the chunks that went out,
// on a connection that stays usable: the context's end is the sender's,
// not a broken connection.
func TestCallOutChunkCutShortKeepsTheTerminal(t *testing.T) {
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "c.sock"))
	require.NoError(t, err)
	defer ln.Close()
	a, err := net.Dial("unix", ln.Addr().String())
	require.NoError(t, err)
	b, err := ln.Accept() // nobody reads b until the end: the socket and the Writer's queue fill
	require.NoError(t, err)
	defer b.Close()
	l := packetio.DefaultLimits()
	w := &connWriter{w: coalesce.New(a, l)}
	defer w.w.Close() // after a's Close (defers run last first)
	defer a.Close()
	aborted := false
	out := &callOut{w: w, id: "n1", seq: 1, invalid: make(chan struct{}), release: func() {}, abort: func() { aborted = true }}

	payload := frame.MustPayload(map[string]any{"s": string(make([]byte, 4000))})
	sent, cut := 0, 0
	for cut == 0 {
		require.Less(t, sent, 10_000, "the Writer's queue never filled")
		f, err := frame.NewChunk("x", frame.ProviderToCaller, 1, payload, nil)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err = out.put(ctx, f)
		cancel()
		switch {
		case err == nil:
			sent++
		case errors.Is(err, context.DeadlineExceeded):
			cut++
		default:
			require.NoError(t, err)
		}
	}
	require.False(t, aborted, "a sender's context ending is not the connection's failure")

	got := make(chan []wire.Packet, 1)
	go func() { // ends at the end packet, or when b is closed
		r := packetio.NewReader(b, l)
		var ps []wire.Packet
		for {
			p, err := r.ReadPacket()
			if err != nil {
				break
			}
			ps = append(ps, p)
			if _, ok := p.(*wire.End); ok {
				break
			}
		}
		got <- ps
	}()
	term, _ := frame.NewCompleted("x", frame.ProviderToCaller, 1, nil)
	last, err := out.put(context.Background(), term)
	require.True(t, last)
	require.NoError(t, err, "the terminal is written")
	var ps []wire.Packet
	select {
	case ps = <-got:
	case <-time.After(10 * time.Second):
		b.Close()
		<-got
		require.FailNow(t, "the terminal and end never came")
	}
	require.Len(t, ps, sent+2, "every chunk that went out, the terminal and the end")
	for i, p := range ps[:sent+1] {
		f, ok := p.(*wire.Frame)
		require.True(t, ok)
		require.EqualValues(t, i+1, f.Sequence, "sequences have no gap")
	}
	require.Equal(t, frame.KindCompleted, ps[sent].(*wire.Frame).Kind)
}

// TestHostToolOutputLoggedOnceWritten: a host tool's chunk is recorded as
// output only once it was written to the calling child's connection,
// numbered as written: the chunk whose Send gave up waiting for room (the
// child was not reading) is not in the log, since the child never got it.
func TestHostToolOutputLoggedOnceWritten(t *testing.T) {
	obs := &collector{}
	h := recordedHost(t, fakeConfig("serve"), calllog.Options{Observers: []calllog.Observer{obs}})
	ctx := callCtx(t, 20*time.Second)

	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "c.sock"))
	require.NoError(t, err)
	defer ln.Close()
	a, err := net.Dial("unix", ln.Addr().String())
	require.NoError(t, err)
	b, err := ln.Accept() // nobody reads b until a chunk was cut short
	require.NoError(t, err)
	defer b.Close()
	l := packetio.DefaultLimits()
	w := &connWriter{w: coalesce.New(a, l)}
	defer w.w.Close()
	defer a.Close()
	out := &callOut{w: w, id: "n1", seq: 1, invalid: make(chan struct{}), release: func() {}, abort: func() {}}

	rec, err := h.rec.Begin(ctx, recorder.CallInfo{ID: "ht1", Tool: "t"})
	require.NoError(t, err)
	payload := frame.MustPayload(map[string]any{"s": string(make([]byte, 4000))})
	sent := 0
	cut := make(chan struct{})
	ht := &HostTool{Run: func(ctx context.Context, c *ToolCall) (frame.Payload, error) {
		defer close(cut)
		for sent < 10_000 {
			sctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			err := c.Send(sctx, payload, nil)
			cancel()
			if err != nil {
				return nil, nil
			}
			sent++
		}
		return nil, errors.New("the Writer's queue never filled")
	}}
	callCtx, cancelCall := context.WithCancel(rec.Context(ctx))
	defer cancelCall()
	r := &recordedHostCall{hc: newHostCallee(callCtx, cancelCall, ht, &toolschema.Tool{}, &ToolCall{ID: "ht1"}), rec: rec}
	done := make(chan error, 1)
	r.start(out, done)
	<-cut
	got := make(chan int, 1)
	go func() { // ends at the end packet, or when b is closed
		rd := packetio.NewReader(b, l)
		chunks := 0
		for {
			p, err := rd.ReadPacket()
			if err != nil {
				break
			}
			if f, ok := p.(*wire.Frame); ok && f.Kind == frame.KindChunk {
				chunks++
			}
			if _, ok := p.(*wire.End); ok {
				break
			}
		}
		got <- chunks
	}()
	select {
	case err := <-done:
		require.NoError(t, err, "the terminal is written")
	case <-time.After(10 * time.Second):
		b.Close()
		require.FailNow(t, "the host tool's terminal never went out")
	}
	<-r.hc.done
	require.Equal(t, sent, <-got, "chunks the child got")
	require.NoError(t, h.FlushObservers(ctx))
	var seqs []uint64
	for _, e := range obs.got() {
		if e.Call == "ht1" && e.Kind == calllog.KindOutput {
			seqs = append(seqs, e.FrameSeq)
		}
	}
	require.Len(t, seqs, sent, "output events: one per chunk written, none for the one cut short")
	for i, s := range seqs {
		require.EqualValues(t, i+1, s, "output %d's sequence", i)
	}
}
