package host

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skulkrt/skulk/frame"
)

// okRoundTrip sends one chunk on an open "ok" call and reads it back.
func okRoundTrip(t *testing.T, c *Call, text string) {
	t.Helper()
	ctx := callCtx(t, 10*time.Second)
	if err := c.Send(ctx, frame.MustPayload(map[string]any{"text": text}), nil); err != nil {
		t.Fatalf("Send: %v", err)
	}
	f, err := c.Recv(ctx)
	if err != nil || f.Kind != frame.KindChunk {
		t.Fatalf("Recv: %v %v", f.Kind, err)
	}
	if s, _ := f.Payload.Text(); s != text {
		t.Fatalf("echo %q, want %q", s, text)
	}
}

func TestMisbehavingChild(t *testing.T) {
	h, _ := testHost(t, fastHealth(fakeConfig("serve")), 2*time.Minute)
	ctx := callCtx(t, time.Minute)
	// A well-behaved call stays open on the same child throughout.
	good, err := h.Call(ctx, "ok", nil)
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := good.Recv(ctx); f.Kind != frame.KindStarted {
		t.Fatalf("first frame %v", f.Kind)
	}
	okRoundTrip(t, good, "before")
	for _, tc := range []struct {
		tool   string
		chunks int    // chunks the caller gets before the synthetic terminal
		reason string // in the message
	}{
		{"gap", 0, "gap"},
		{"dupseq", 1, "duplicate"},
		{"othercall", 0, "another call"},
		{"oversize", 0, "header length"},
		{"garbage", 0, "MessagePack"},
		{"badfield", 0, "synthetic"},
		{"badoutput", 0, "output payload breaks its schema at /i (type): got string of 12 bytes"},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			c, err := h.Call(ctx, tc.tool, nil)
			if err != nil {
				t.Fatal(err)
			}
			term, n := recvUntilTerminal(t, c, 10*time.Second)
			wantSynthetic(t, term, frame.CodeInvalidFrame)
			if n != tc.chunks || term.Sequence != uint64(n)+1 {
				t.Fatalf("%d chunks, synthetic sequence %d", n, term.Sequence)
			}
			if !strings.Contains(term.Error.Message, tc.reason) {
				t.Fatalf("message %q lacks %q", term.Error.Message, tc.reason)
			}
			if strings.Contains(term.Error.Message, "not a number") {
				t.Fatalf("message echoes the value: %q", term.Error.Message)
			}
			okRoundTrip(t, good, tc.tool)
		})
	}
	if err := good.CloseSend(); err != nil {
		t.Fatal(err)
	}
	res, err := good.Wait()
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		N      int    `json:"n"`
		Prefix string `json:"prefix"`
	}
	res.Decode(&v)
	if v.N != 8 || v.Prefix != "p" {
		t.Fatalf("result %+v: want 8 chunks and the default prefix filled in", v)
	}
	if info := h.Children()[0]; info.Restarts != 0 {
		t.Fatalf("the child was restarted: %+v", info)
	}
}

// A second terminal after the first: the outcome stands (docs/protocol.md
// §7, "Provider frames that break the rules") and the connection is never
// reused.
func TestDuplicateTerminal(t *testing.T) {
	h, _ := testHost(t, fastHealth(fakeConfig("serve")), time.Minute)
	ctx := callCtx(t, 30*time.Second)
	c, err := h.Call(ctx, "dupterm", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if string(res) != string(frame.MustPayload(map[string]any{"first": true})) {
		t.Fatalf("result is not the first terminal's")
	}
	waitFor(t, func() bool { return h.Children()[0].Running == 0 })
	h.mu.Lock()
	idle := len(h.slots[0].cur.idle)
	h.mu.Unlock()
	if idle != 0 {
		t.Fatalf("the connection went back to the idle list")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestConnectionReuse(t *testing.T) {
	h, _ := testHost(t, fastHealth(fakeConfig("serve")), time.Minute)
	ctx := callCtx(t, 30*time.Second)
	for i := range 5 {
		c, err := h.Call(ctx, "ok", frame.MustPayload(map[string]any{"prefix": "x"}))
		if err != nil {
			t.Fatal(err)
		}
		if f, _ := c.Recv(ctx); f.Kind != frame.KindStarted {
			t.Fatalf("first frame %v", f.Kind)
		}
		okRoundTrip(t, c, "hi")
		c.CloseSend()
		if _, err := c.Wait(); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		waitFor(t, func() bool { return h.Children()[0].Running == 0 })
	}
	h.mu.Lock()
	n := len(h.slots[0].cur.conns)
	h.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d connections for 5 sequential calls, want 1 reused", n)
	}
}

func TestNoEndClosesConnection(t *testing.T) {
	cfg := fastHealth(fakeConfig("serve"))
	cfg.EndGrace = 200 * time.Millisecond
	h, _ := testHost(t, cfg, time.Minute)
	ctx := callCtx(t, 30*time.Second)
	c, err := h.Call(ctx, "noend", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(); err != nil {
		t.Fatalf("the terminal stands without end: %v", err)
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
	if err != nil {
		t.Fatal(err)
	}
	term, n := recvUntilTerminal(t, c, 5*time.Second)
	wantSynthetic(t, term, frame.CodeTransportError)
	if n != 1 || term.Sequence != 2 {
		t.Fatalf("%d chunks, sequence %d", n, term.Sequence)
	}
}

func TestDieUnreachableWithStderr(t *testing.T) {
	h, _ := testHost(t, fastHealth(fakeConfig("serve")), time.Minute)
	c, err := h.Call(callCtx(t, 30*time.Second), "die", nil)
	if err != nil {
		t.Fatal(err)
	}
	term, _ := recvUntilTerminal(t, c, 5*time.Second)
	wantSynthetic(t, term, frame.CodeUnreachable)
	_, err = c.Wait()
	var ce *frame.Error
	if !errors.As(err, &ce) || !strings.Contains(Stderr(err), "fake: dying on purpose") {
		t.Fatalf("Wait: %#v", err)
	}
	waitFor(t, func() bool { return h.Children()[0].State == StateReady && h.Children()[0].Restarts == 1 })
}

func TestSyntheticTimeout(t *testing.T) {
	cfg := fastHealth(fakeConfig("serve"))
	cfg.CancelGrace = 100 * time.Millisecond
	h, _ := testHost(t, cfg, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	c, err := h.Call(ctx, "hang", nil)
	if err != nil {
		t.Fatal(err)
	}
	term, _ := recvUntilTerminal(t, c, 10*time.Second)
	wantSynthetic(t, term, frame.CodeTimeout)
	// deadline + cancel_grace + 1 s, with a margin.
	if d := time.Since(start); d < 1250*time.Millisecond || d > 3*time.Second {
		t.Fatalf("synthetic timeout after %v", d)
	}
}

func TestSyntheticCancelled(t *testing.T) {
	cfg := fastHealth(fakeConfig("serve"))
	cfg.CancelGrace = 100 * time.Millisecond
	h, _ := testHost(t, cfg, time.Minute)
	c, err := h.Call(callCtx(t, 30*time.Second), "hang", nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Cancel()
	term, _ := recvUntilTerminal(t, c, 10*time.Second)
	if !term.Synthetic || term.Kind != frame.KindCancelled {
		t.Fatalf("terminal %v synthetic=%v", term.Kind, term.Synthetic)
	}
}

// TestHealthTimeout: a child that answers no ping ("nopong"), or answers
// every ping with the first one's nonce ("stalepong": a pong counts only
// when it answers a ping newer than the last one answered), goes
// unhealthy in every incarnation: the slot gives up after its restarts
// and the pool reports itself down with the cause.
func TestHealthTimeout(t *testing.T) {
	for _, mode := range []string{"nopong", "stalepong"} {
		t.Run(mode, func(t *testing.T) {
			cfg := fastHealth(fakeConfig(mode))
			cfg.Restart.MaxRestarts = 2
			cfg.HealthTimeout = 500 * time.Millisecond
			h, _ := testHost(t, cfg, time.Minute)
			waitFor(t, func() bool { return h.Children()[0].State == StateDown })
			_, err := h.Call(callCtx(t, 5*time.Second), "ok", nil)
			if !errors.Is(err, ErrPoolDown) || !errors.Is(err, ErrUnhealthy) {
				t.Fatalf("Call on a down pool: %v", err)
			}
			if r := h.Children()[0].Restarts; r != 2 {
				t.Fatalf("restarts %d, want 2", r)
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
			if !errors.Is(err, tc.want) {
				t.Fatalf("Start: %v, want %v", err, tc.want)
			}
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
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Start: %v, want an error matching fs.ErrNotExist", err)
	}
	checkClean(t, base, fds)
}

func TestRefusals(t *testing.T) {
	h, _ := testHost(t, fakeConfig("serve"), time.Minute)
	ctx := callCtx(t, 10*time.Second)
	if _, err := h.Call(ctx, "nope", nil); !errors.Is(err, ErrUnknownTool) {
		t.Fatalf("unknown tool: %v", err)
	}
	_, err := h.Call(ctx, "ok", frame.MustPayload(map[string]any{"n": -1, "prefix": "secret-value"}))
	var se *SchemaError
	if !errors.As(err, &se) || se.Schema != "arguments" || se.Field != "/n" || se.Keyword != "minimum" || se.Value != "integer" {
		t.Fatalf("bad arguments: %#v", err)
	}
	if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "-1") {
		t.Fatalf("error echoes the value: %v", err)
	}
	if n := h.Children()[0].Running; n != 0 {
		t.Fatalf("a refused call holds a slot")
	}
	tools := h.Tools()
	if len(tools) == 0 || tools[0].ID != "ok" {
		t.Fatalf("tools %+v", tools)
	}
	h.Close(ctx)
	if _, err := h.Call(ctx, "ok", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}
