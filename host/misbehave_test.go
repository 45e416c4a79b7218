package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
)

// okRoundTrip sends one chunk on an open "ok" call and reads it back.
func okRoundTrip(t *testing.T, c *Call, text string) {
	t.Helper()
	ctx := callCtx(t, 10*time.Second)
	require.NoError(t, c.Send(ctx, frame.MustPayload(map[string]any{"text": text}), nil), "Send")
	f, err := c.Recv(ctx)
	require.Falsef(t, err != nil || f.Kind != frame.KindChunk, "Recv: %v %v", f.Kind, err)
	if s, _ := f.Payload.Text(); s != text {
		require.FailNow(t, fmt.Sprintf("echo %q, want %q", s, text))
	}
}

func TestMisbehavingChild(t *testing.T) {
	h, _ := testHost(t, fastHealth(fakeConfig("serve")), 2*time.Minute)
	ctx := callCtx(t, time.Minute)
	// A well-behaved call stays open on the same child throughout.
	good, err := h.Call(ctx, "ok", nil)
	require.NoError(t, err)
	if f, _ := good.Recv(ctx); f.Kind != frame.KindStarted {
		require.FailNow(t, fmt.Sprintf("first frame %v", f.Kind))
	}
	okRoundTrip(t, good, "before")
	for _, tc := range []struct {
		tool   string
		chunks int    // chunks the caller gets before the synthetic terminal
		frames uint64 // provider frames the host read, the refused one included
		reason string // in the message
	}{
		{"gap", 0, 1, "gap"},
		{"dupseq", 1, 2, "duplicate"},
		{"othercall", 0, 1, "another call"},
		{"oversize", 0, 0, "header length"},
		{"garbage", 0, 0, "MessagePack"},
		{"badfield", 0, 0, "synthetic"},
		{"badoutput", 0, 1, "output payload breaks its schema at /i (type): got string of 12 bytes"},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			before := h.Stats().ProviderFrames
			c, err := h.Call(ctx, tc.tool, nil)
			require.NoError(t, err)
			term, n := recvUntilTerminal(t, c, 10*time.Second)
			// Counted before the call's end reaches its caller: a frame the
			// host refused crossed the connection too.
			require.Equal(t, tc.frames, h.Stats().ProviderFrames-before, "provider frames counted as the call ended")
			wantSynthetic(t, term, frame.CodeInvalidFrame)
			require.Falsef(t, n != tc.chunks || term.Sequence != uint64(n)+1, "%d chunks, synthetic sequence %d", n, term.Sequence)
			require.Truef(t, strings.Contains(term.Error.Message, tc.reason), "message %q lacks %q", term.Error.Message, tc.reason)
			require.Falsef(t, strings.Contains(term.Error.Message, "not a number"), "message echoes the value: %q", term.Error.Message)
			okRoundTrip(t, good, tc.tool)
		})
	}
	require.NoError(t, good.CloseSend())
	res, err := good.Wait()
	require.NoError(t, err)
	var v struct {
		N      int    `json:"n"`
		Prefix string `json:"prefix"`
	}
	res.Decode(&v)
	require.Falsef(t, v.N != 8 || v.Prefix != "p", "result %+v: want 8 chunks and the default prefix filled in", v)
	if info := h.Children()[0]; info.Restarts != 0 {
		require.FailNow(t, fmt.Sprintf("the child was restarted: %+v", info))
	}
}

// A second terminal after the first: the outcome stands (docs/protocol.md
// §7, "Provider frames that break the rules") and the connection is never
// reused.
func TestDuplicateTerminal(t *testing.T) {
	h, _ := testHost(t, fastHealth(fakeConfig("serve")), time.Minute)
	ctx := callCtx(t, 30*time.Second)
	c, err := h.Call(ctx, "dupterm", nil)
	require.NoError(t, err)
	res, err := c.Wait()
	require.NoError(t, err)
	require.Falsef(t, string(res) != string(frame.MustPayload(map[string]any{"first": true})), "result is not the first terminal's")
	waitFor(t, func() bool { return h.Children()[0].Running == 0 })
	h.mu.Lock()
	idle := len(h.slots[0].cur.idle)
	h.mu.Unlock()
	require.EqualValuesf(t, 0, idle, "the connection went back to the idle list")
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		require.False(t, time.Now().After(deadline), "condition not met in 10 s")
		time.Sleep(5 * time.Millisecond)
	}
}

func TestConnectionReuse(t *testing.T) {
	h, _ := testHost(t, fastHealth(fakeConfig("serve")), time.Minute)
	ctx := callCtx(t, 30*time.Second)
	for i := range 5 {
		c, err := h.Call(ctx, "ok", frame.MustPayload(map[string]any{"prefix": "x"}))
		require.NoError(t, err)
		if f, _ := c.Recv(ctx); f.Kind != frame.KindStarted {
			require.FailNow(t, fmt.Sprintf("first frame %v", f.Kind))
		}
		okRoundTrip(t, c, "hi")
		c.CloseSend()
		if _, err := c.Wait(); err != nil {
			require.FailNow(t, fmt.Sprintf("call %d: %v", i, err))
		}
		waitFor(t, func() bool { return h.Children()[0].Running == 0 })
	}
	h.mu.Lock()
	n := len(h.slots[0].cur.conns)
	h.mu.Unlock()
	require.EqualValuesf(t, 1, n, "%d connections for 5 sequential calls, want 1 reused", n)
}

func TestNoEndClosesConnection(t *testing.T) {
	cfg := fastHealth(fakeConfig("serve"))
	cfg.endGrace = 200 * time.Millisecond
	h, _ := testHost(t, cfg, time.Minute)
	ctx := callCtx(t, 30*time.Second)
	c, err := h.Call(ctx, "noend", nil)
	require.NoError(t, err)
	if _, err := c.Wait(); err != nil {
		require.FailNow(t, fmt.Sprintf("the terminal stands without end: %v", err))
	}
	waitFor(t, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.slots[0].cur.conns) == 0 && h.slots[0].cur.running == 0
	})
}

func TestHangupTransportError(t *testing.T) {
	h, _ := testHost(t, fastHealth(fakeConfig("serve")), time.Minute)
	c, err := h.Call(callCtx(t, 30*time.Second), "hangup", nil)
	require.NoError(t, err)
	term, n := recvUntilTerminal(t, c, 5*time.Second)
	wantSynthetic(t, term, frame.CodeTransportError)
	require.Falsef(t, n != 1 || term.Sequence != 2, "%d chunks, sequence %d", n, term.Sequence)
}

func TestDieUnreachableWithStderr(t *testing.T) {
	h, _ := testHost(t, fastHealth(fakeConfig("serve")), time.Minute)
	c, err := h.Call(callCtx(t, 30*time.Second), "die", nil)
	require.NoError(t, err)
	term, _ := recvUntilTerminal(t, c, 5*time.Second)
	wantSynthetic(t, term, frame.CodeUnreachable)
	_, err = c.Wait()
	var ce *frame.Error
	require.Falsef(t, !errors.As(err, &ce) || !strings.Contains(Stderr(err), "fake: dying on purpose"), "Wait: %#v", err)
	waitFor(t, func() bool { return h.Children()[0].State == "ready" && h.Children()[0].Restarts == 1 })
}

func TestSyntheticTimeout(t *testing.T) {
	cfg := fastHealth(fakeConfig("serve"))
	cfg.CancelGrace = 100 * time.Millisecond
	h, _ := testHost(t, cfg, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	c, err := h.Call(ctx, "hang", nil)
	require.NoError(t, err)
	term, _ := recvUntilTerminal(t, c, 10*time.Second)
	wantSynthetic(t, term, frame.CodeTimeout)
	// deadline + cancel_grace + 1 s, with a margin.
	if d := time.Since(start); d < 1250*time.Millisecond || d > 3*time.Second {
		require.FailNow(t, fmt.Sprintf("synthetic timeout after %v", d))
	}
}

func TestSyntheticCancelled(t *testing.T) {
	sideBySide(t)
	cfg := fastHealth(fakeConfig("serve"))
	cfg.CancelGrace = 100 * time.Millisecond
	h, _ := testHost(t, cfg, time.Minute)
	c, err := h.Call(callCtx(t, 30*time.Second), "hang", nil)
	require.NoError(t, err)
	c.Cancel()
	term, _ := recvUntilTerminal(t, c, 10*time.Second)
	require.Falsef(t, !term.Synthetic || term.Kind != frame.KindCancelled, "terminal %v synthetic=%v", term.Kind, term.Synthetic)
}

// TestHealthTimeout: a child that answers no ping ("nopong"), or answers
// every ping with the first one's nonce ("stalepong": a pong counts only
// when it answers a ping newer than the last one answered), goes
// unhealthy in every incarnation: the slot gives up after its restarts
// and the pool reports itself down with the cause.
func TestHealthTimeout(t *testing.T) {
	sideBySide(t)
	for _, mode := range []string{"nopong", "stalepong"} {
		t.Run(mode, func(t *testing.T) {
			cfg := fastHealth(fakeConfig(mode))
			cfg.Restart.MaxRestarts = 2
			cfg.HealthTimeout = 500 * time.Millisecond
			cfg.IdleHealthInterval = cfg.HealthInterval // idle, yet pinged every interval
			h, _ := testHost(t, cfg, time.Minute)
			waitFor(t, func() bool { return h.Children()[0].State == "down" })
			_, err := h.Call(callCtx(t, 5*time.Second), "ok", nil)
			require.Falsef(t, !errors.Is(err, ErrPoolDown) || !errors.Is(err, ErrUnhealthy), "Call on a down pool: %v", err)
			if r := h.Children()[0].Restarts; r != 2 {
				require.FailNow(t, fmt.Sprintf("restarts %d, want 2", r))
			}
		})
	}
}

func TestStartFailures(t *testing.T) {
	for _, tc := range []struct {
		mode    string
		timeout time.Duration
		want    error
	}{
		{"badversion", 10 * time.Second, errProtocolVersion},
		{"nohello", 500 * time.Millisecond, errStartTimeout},
		{"exit", 10 * time.Second, ErrHandshake},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			base := t.TempDir()
			fds := countFDs(t)
			cfg := fakeConfig(tc.mode)
			cfg.StartTimeout = tc.timeout
			cfg.TempDir = base
			_, err := Start(callCtx(t, 10*time.Second), cfg)
			require.ErrorIsf(t, err, tc.want, "Start: %v, want %v", err, tc.want)
			checkClean(t, base, fds)
		})
	}
}

// A command that does not exist fails Start with the exec error and leaves
// nothing behind: the clean-up of a child that never had a process returns
// without a panic.
func TestStartMissingCommand(t *testing.T) {
	base := t.TempDir()
	fds := countFDs(t)
	cfg := Config{Command: filepath.Join(base, "no-such-provider"), TempDir: base}
	_, err := Start(callCtx(t, 10*time.Second), cfg)
	require.Falsef(t, err == nil || !errors.Is(err, fs.ErrNotExist), "Start: %v, want an error matching fs.ErrNotExist", err)
	checkClean(t, base, fds)
}

func TestRefusals(t *testing.T) {
	h, _ := testHost(t, fakeConfig("serve"), time.Minute)
	ctx := callCtx(t, 10*time.Second)
	if _, err := h.Call(ctx, "nope", nil); !errors.Is(err, ErrUnknownTool) {
		require.FailNow(t, fmt.Sprintf("unknown tool: %v", err))
	}
	_, err := h.Call(ctx, "ok", frame.MustPayload(map[string]any{"n": -1, "prefix": "secret-value"}))
	var se *SchemaError
	require.Falsef(t, !errors.As(err, &se) || se.Schema != "arguments" || se.Field != "/n" || se.Keyword != "minimum" || se.Value != "integer", "bad arguments: %#v", err)
	require.Falsef(t, strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "-1"), "error echoes the value: %v", err)
	if n := h.Children()[0].Running; n != 0 {
		require.FailNow(t, fmt.Sprintf("a refused call holds a slot"))
	}
	tools := h.Tools()
	require.Falsef(t, len(tools) == 0 || tools[0].ID != "ok", "tools %+v", tools)
	h.Close(ctx)
	if _, err := h.Call(ctx, "ok", nil); !errors.Is(err, ErrClosed) {
		require.FailNow(t, fmt.Sprintf("after Close: %v", err))
	}
}
