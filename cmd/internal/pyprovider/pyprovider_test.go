package pyprovider_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/internal/testnet"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	testnet.QuickRaceExit() // for skulk-host, built as this binary was
	goleak.VerifyTestMain(m, testnet.CleanupAndExit(builds.Remove))
}

// provider returns the Python provider's path, skipping the test (or
// failing it, with SKULK_REQUIRE_PYTHON=1) when Python or msgpack is
// missing.
func provider(t *testing.T) string {
	t.Helper()
	missing := func(why string) {
		require.NotEqualValuesf(t, "1", os.Getenv("SKULK_REQUIRE_PYTHON"), "SKULK_REQUIRE_PYTHON=1 but %s", why)
		t.Skipf("skipped: %s (apt-get install -y python3 python3-msgpack)", why)
	}
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		if py, err = exec.LookPath("python3"); err != nil {
			missing("no python3")
		}
	}
	if out, err := exec.Command(py, "-c", "import msgpack").CombinedOutput(); err != nil {
		missing("python3 has no msgpack: " + string(out))
	}
	p, err := filepath.Abs(filepath.Join("..", "..", "..", "python", "skulk-py-child"))
	require.NoError(t, err)
	_, err = os.Stat(p)
	require.NoError(t, err)
	return p
}

// start starts a host of one Python child with the test tools, closed
// when t ends.
func start(t *testing.T) *host.Host {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := host.Start(ctx, host.Config{
		Command:        provider(t),
		Args:           []string{"--test-tools"},
		HealthInterval: 100 * time.Millisecond,
		HealthTimeout:  2500 * time.Millisecond,
		KillGrace:      500 * time.Millisecond,
		Restart:        host.RestartPolicy{BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		assert.NoError(t, h.Close(ctx), "Close")
	})
	return h
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestTools: the host reads the Python child's hello: every demo tool,
// each with a version and its schemas.
func TestTools(t *testing.T) {
	h := start(t)
	got := map[string]bool{}
	for _, tl := range h.Tools() {
		got[tl.ID] = true
		assert.Falsef(t, tl.Version == "" || tl.ArgumentsSchema == nil, "tool %s: version %q, arguments schema %v", tl.ID, tl.Version, tl.ArgumentsSchema)
	}
	for _, id := range []string{"echo", "upper", "count", "media", "sleep", "fail", "crash"} {
		assert.Falsef(t, !got[id], "tool %s missing (have %v)", id, got)
	}
}

// TestCalls: a streamed call with a half-close, a plain request, media
// whose bytes are checked against the child's own SHA-256, a failure, a
// deadline and a cancel.
func TestCalls(t *testing.T) {
	h := start(t)
	ctx := callCtx(t)

	c, err := h.Call(ctx, "upper", nil)
	require.NoError(t, err)
	for _, s := range []string{"hello", "wörld"} {
		require.NoError(t, c.Send(ctx, frame.MustPayload(map[string]any{"text": s}), nil))
	}
	c.CloseSend()
	var texts []string
	for f, err := range c.Frames() {
		require.NoError(t, err)
		if f.Kind == frame.KindChunk {
			s, _ := f.Payload.Text()
			texts = append(texts, s)
		}
	}
	assert.Falsef(t, len(texts) != 2 || texts[0] != "HELLO" || texts[1] != "WÖRLD", "upper: %q", texts)

	c, err = h.Call(ctx, "count", frame.MustPayload(map[string]any{"n": 5}), host.WithInput())
	require.NoError(t, err)
	res, err := c.Wait()
	if m, _ := res.Map(); err != nil || fmt.Sprint(m["n"]) != "5" {
		assert.Fail(t, fmt.Sprintf("count: %v, %v", m, err))
	}

	const size = 3<<20 + 17
	c, err = h.Call(ctx, "media", frame.MustPayload(map[string]any{"bytes": size, "chunk": 1 << 20}), host.WithInput())
	require.NoError(t, err)
	sum, n := sha256.New(), 0
	for {
		f, err := c.Recv(ctx)
		require.NoError(t, err)
		if m, ok := f.Media.(*frame.InlineMedia); ok {
			sum.Write(m.Data)
			n += len(m.Data)
		}
		if f.Kind.IsTerminal() {
			p, _ := f.Payload.Map()
			assert.Falsef(t, f.Kind != frame.KindCompleted || p["sha256"] != hex.EncodeToString(sum.Sum(nil)) || n != size, "media: %v %v, %d bytes", f.Kind, p, n)
			break
		}
	}

	c, err = h.Call(ctx, "fail", frame.MustPayload(map[string]any{"message": "boom"}), host.WithInput())
	require.NoError(t, err)
	var ce *frame.Error
	if _, err := c.Wait(); !errors.As(err, &ce) || ce.Code != frame.CodeProviderError || ce.Message != "boom" || ce.Synthetic {
		assert.Fail(t, fmt.Sprintf("fail: %v", err))
	}

	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	c, err = h.Call(tctx, "sleep", frame.MustPayload(map[string]any{"ms": 20000}), host.WithInput())
	require.NoError(t, err)
	if _, err := c.Wait(); !errors.As(err, &ce) || ce.Code != frame.CodeTimeout {
		assert.Fail(t, fmt.Sprintf("sleep past its deadline: %v", err))
	}

	c, err = h.Call(ctx, "sleep", frame.MustPayload(map[string]any{"ms": 20000}))
	require.NoError(t, err)
	if f, err := c.Recv(ctx); err != nil || f.Kind != frame.KindStarted {
		require.FailNow(t, fmt.Sprintf("sleep: %v %v", f.Kind, err))
	}
	c.Cancel()
	if _, err := c.Wait(); !errors.As(err, &ce) || ce.Code != frame.CodeCancelled {
		assert.Fail(t, fmt.Sprintf("cancelled sleep: %v", err))
	}
}

// TestKill9: a kill -9 of the Python child mid-stream gives the call a
// synthetic unreachable; the host restarts the child and the next call
// works.
func TestKill9(t *testing.T) {
	h := start(t)
	ctx := callCtx(t)
	pid := h.Children()[0].PID
	c, err := h.Call(ctx, "count", frame.MustPayload(map[string]any{"n": 10_000_000}))
	require.NoError(t, err)
	for range 10 {
		_, err := c.Recv(ctx)
		require.NoError(t, err)
	}
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	for {
		f, err := c.Recv(ctx)
		require.NoError(t, err)
		if f.Kind.IsTerminal() {
			assert.Falsef(t, !f.Synthetic || f.Error == nil || f.Error.Code != frame.CodeUnreachable, "after kill -9: %v synthetic=%v %v", f.Kind, f.Synthetic, f.Error)
			break
		}
	}
	c, err = h.Call(ctx, "count", frame.MustPayload(map[string]any{"n": 2}), host.WithInput())
	require.NoError(t, err)
	if _, err := c.Wait(); err != nil {
		assert.Fail(t, fmt.Sprintf("after the restart: %v", err))
	}
	if info := h.Children()[0]; info.PID == pid || info.Restarts != 1 {
		assert.Fail(t, fmt.Sprintf("after the restart: %+v (the killed child was %d)", info, pid))
	}
}

// TestNestedCallsThroughHost: the real host offers the Python child's own
// count and relay back to it (docs/protocol.md §8). relay's call of count
// streams count's chunks through and completes with its result; a chain
// of relays deeper than MaxDepth is refused by the Python SDK itself,
// naming the depth and the limit.
func TestNestedCallsThroughHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := host.Start(ctx, host.Config{
		Command:   provider(t),
		Args:      []string{"--call-tools"},
		KillGrace: 500 * time.Millisecond,
		Calls:     host.Calls{Tools: []string{"count", "relay", "upper"}, MaxDepth: 2},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		assert.NoError(t, h.Close(ctx), "Close")
	})
	cctx := callCtx(t)

	// relay's input argument: upper's whole input goes with its invoke
	// (the Python SDK's call(..., input=...)), and upper's chunks come back.
	c, err := h.Call(cctx, "relay", frame.MustPayload(map[string]any{"tool": "upper",
		"input": []any{map[string]any{"text": "ab"}, map[string]any{"text": "c"}}}), host.WithInput())
	require.NoError(t, err)
	var texts []string
	for f, err := range c.Frames() {
		require.NoError(t, err)
		if f.Kind == frame.KindChunk {
			var p struct{ Text string }
			require.NoError(t, f.Payload.Decode(&p))
			texts = append(texts, p.Text)
		}
	}
	_, err = c.Wait()
	require.NoError(t, err)
	assert.Equal(t, []string{"AB", "C"}, texts, "relay of upper with whole input")

	c, err = h.Call(cctx, "relay", frame.MustPayload(map[string]any{"tool": "count", "args": map[string]any{"n": 3}}), host.WithInput())
	require.NoError(t, err)
	n := 0
	for f, err := range c.Frames() {
		require.NoError(t, err)
		if f.Kind == frame.KindChunk {
			n++
		}
	}
	res, err := c.Wait()
	require.Falsef(t, err != nil || n != 3 || string(res) == "", "relay of count: %d chunks, result %v, error %v", n, res, err)
	var r struct{ N int }
	if err := res.Decode(&r); err != nil || r.N != 3 {
		assert.Fail(t, fmt.Sprintf("relay's result %v, want count's {n: 3}", res))
	}

	// relay (depth 0) → relay (1) → relay (2) → count would be at depth 3.
	args := map[string]any{"tool": "relay", "args": map[string]any{"tool": "relay", "args": map[string]any{"tool": "count", "args": map[string]any{"n": 1}}}}
	c, err = h.Call(cctx, "relay", frame.MustPayload(args), host.WithInput())
	require.NoError(t, err)
	var ce *frame.Error
	if _, err := c.Wait(); !errors.As(err, &ce) || ce.Code != frame.CodeProviderError || ce.Message != "call depth 3 is over the host's limit of 2" {
		assert.Fail(t, fmt.Sprintf("relays past MaxDepth: %v", err))
	}
}
