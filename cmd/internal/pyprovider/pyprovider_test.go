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
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { builds.Remove() }))
}

// provider returns the Python provider's path, skipping the test (or
// failing it, with SKULK_REQUIRE_PYTHON=1) when Python or msgpack is
// missing.
func provider(t *testing.T) string {
	t.Helper()
	missing := func(why string) {
		if os.Getenv("SKULK_REQUIRE_PYTHON") == "1" {
			t.Fatalf("SKULK_REQUIRE_PYTHON=1 but %s", why)
		}
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
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
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
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := h.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
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
		if tl.Version == "" || tl.ArgumentsSchema == nil {
			t.Errorf("tool %s: version %q, arguments schema %v", tl.ID, tl.Version, tl.ArgumentsSchema)
		}
	}
	for _, id := range []string{"echo", "upper", "count", "media", "sleep", "fail", "crash"} {
		if !got[id] {
			t.Errorf("tool %s missing (have %v)", id, got)
		}
	}
}

// TestCalls: a streamed call with a half-close, a plain request, media
// whose bytes are checked against the child's own SHA-256, a failure, a
// deadline and a cancel.
func TestCalls(t *testing.T) {
	h := start(t)
	ctx := callCtx(t)

	c, err := h.Call(ctx, "upper", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"hello", "wörld"} {
		if err := c.Send(ctx, frame.MustPayload(map[string]any{"text": s}), nil); err != nil {
			t.Fatal(err)
		}
	}
	c.CloseSend()
	var texts []string
	for f, err := range c.Frames() {
		if err != nil {
			t.Fatal(err)
		}
		if f.Kind == frame.KindChunk {
			s, _ := f.Payload.Text()
			texts = append(texts, s)
		}
	}
	if len(texts) != 2 || texts[0] != "HELLO" || texts[1] != "WÖRLD" {
		t.Errorf("upper: %q", texts)
	}

	c, err = h.Call(ctx, "count", frame.MustPayload(map[string]any{"n": 5}), host.WithInput())
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Wait()
	if m, _ := res.Map(); err != nil || fmt.Sprint(m["n"]) != "5" {
		t.Errorf("count: %v, %v", m, err)
	}

	const size = 3<<20 + 17
	c, err = h.Call(ctx, "media", frame.MustPayload(map[string]any{"bytes": size, "chunk": 1 << 20}), host.WithInput())
	if err != nil {
		t.Fatal(err)
	}
	sum, n := sha256.New(), 0
	for {
		f, err := c.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m, ok := f.Media.(*frame.InlineMedia); ok {
			sum.Write(m.Data)
			n += len(m.Data)
		}
		if f.Kind.IsTerminal() {
			p, _ := f.Payload.Map()
			if f.Kind != frame.KindCompleted || p["sha256"] != hex.EncodeToString(sum.Sum(nil)) || n != size {
				t.Errorf("media: %v %v, %d bytes", f.Kind, p, n)
			}
			break
		}
	}

	c, err = h.Call(ctx, "fail", frame.MustPayload(map[string]any{"message": "boom"}), host.WithInput())
	if err != nil {
		t.Fatal(err)
	}
	var ce *frame.Error
	if _, err := c.Wait(); !errors.As(err, &ce) || ce.Code != frame.CodeProviderError || ce.Message != "boom" || ce.Synthetic {
		t.Errorf("fail: %v", err)
	}

	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	c, err = h.Call(tctx, "sleep", frame.MustPayload(map[string]any{"ms": 20000}), host.WithInput())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(); !errors.As(err, &ce) || ce.Code != frame.CodeTimeout {
		t.Errorf("sleep past its deadline: %v", err)
	}

	c, err = h.Call(ctx, "sleep", frame.MustPayload(map[string]any{"ms": 20000}))
	if err != nil {
		t.Fatal(err)
	}
	if f, err := c.Recv(ctx); err != nil || f.Kind != frame.KindStarted {
		t.Fatalf("sleep: %v %v", f.Kind, err)
	}
	c.Cancel()
	if _, err := c.Wait(); !errors.As(err, &ce) || ce.Code != frame.CodeCancelled {
		t.Errorf("cancelled sleep: %v", err)
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
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := c.Recv(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := c.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if f.Kind.IsTerminal() {
			if !f.Synthetic || f.Error == nil || f.Error.Code != frame.CodeUnreachable {
				t.Errorf("after kill -9: %v synthetic=%v %v", f.Kind, f.Synthetic, f.Error)
			}
			break
		}
	}
	c, err = h.Call(ctx, "count", frame.MustPayload(map[string]any{"n": 2}), host.WithInput())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(); err != nil {
		t.Errorf("after the restart: %v", err)
	}
	if info := h.Children()[0]; info.PID == pid || info.Restarts != 1 {
		t.Errorf("after the restart: %+v (the killed child was %d)", info, pid)
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
		Calls:     host.Calls{Tools: []string{"count", "relay"}, MaxDepth: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := h.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	cctx := callCtx(t)

	c, err := h.Call(cctx, "relay", frame.MustPayload(map[string]any{"tool": "count", "args": map[string]any{"n": 3}}), host.WithInput())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for f, err := range c.Frames() {
		if err != nil {
			t.Fatal(err)
		}
		if f.Kind == frame.KindChunk {
			n++
		}
	}
	res, err := c.Wait()
	if err != nil || n != 3 || string(res) == "" {
		t.Fatalf("relay of count: %d chunks, result %v, error %v", n, res, err)
	}
	var r struct{ N int }
	if err := res.Decode(&r); err != nil || r.N != 3 {
		t.Errorf("relay's result %v, want count's {n: 3}", res)
	}

	// relay (depth 0) → relay (1) → relay (2) → count would be at depth 3.
	args := map[string]any{"tool": "relay", "args": map[string]any{"tool": "relay", "args": map[string]any{"tool": "count", "args": map[string]any{"n": 1}}}}
	c, err = h.Call(cctx, "relay", frame.MustPayload(args), host.WithInput())
	if err != nil {
		t.Fatal(err)
	}
	var ce *frame.Error
	if _, err := c.Wait(); !errors.As(err, &ce) || ce.Code != frame.CodeProviderError || ce.Message != "call depth 3 is over the host's limit of 2" {
		t.Errorf("relays past MaxDepth: %v", err)
	}
}
