package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
)

// readyPID returns the pid of slot 0's child once it is ready and is not
// notPID.
func readyPID(t *testing.T, h *Host, notPID int) int {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		info := h.Children()[0]
		if info.State == "ready" && info.PID != 0 && info.PID != notPID {
			return info.PID
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.FailNow(t, fmt.Sprintf("no ready child: %+v", h.Children()))
	return 0
}

// recvUntilTerminal reads c to its terminal and returns it with how many
// chunks came before.
func recvUntilTerminal(t *testing.T, c *Call, limit time.Duration) (frame.Frame, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	n := 0
	for {
		f, err := c.Recv(ctx)
		require.NoError(t, err, "Recv")
		if f.Kind.IsTerminal() {
			return f, n
		}
		if f.Kind == frame.KindChunk {
			n++
		}
	}
}

func wantSynthetic(t *testing.T, f frame.Frame, code frame.Code) {
	t.Helper()
	require.Falsef(t, !f.Synthetic || f.Kind != frame.KindFailed || f.Error == nil || f.Error.Code != code, "terminal %v synthetic=%v error=%v, want synthetic failed %v", f.Kind, f.Synthetic, f.Error, code)
}

// succeeds asserts that a fresh call works (on a restarted child if need be).
func succeeds(t *testing.T, h *Host) {
	t.Helper()
	ctx := callCtx(t, 20*time.Second)
	c, err := h.Call(ctx, "count", frame.MustPayload(map[string]any{"n": 3}))
	require.NoError(t, err, "next call")
	c.CloseSend()
	if _, err := c.Wait(); err != nil {
		require.FailNow(t, fmt.Sprintf("next call: %v", err))
	}
}

func TestKill9MidStream(t *testing.T) {
	h, _ := testHost(t, fastHealth(realConfig()), time.Minute)
	pid := readyPID(t, h, 0)
	ctx := callCtx(t, 30*time.Second)
	c, err := h.Call(ctx, "count", frame.MustPayload(map[string]any{"n": 10_000_000}))
	require.NoError(t, err)
	for range 10 {
		if _, err := c.Recv(ctx); err != nil {
			require.FailNow(t, fmt.Sprint(err))
		}
	}
	killed := time.Now()
	syscall.Kill(pid, syscall.SIGKILL)
	term, _ := recvUntilTerminal(t, c, 5*time.Second)
	if d := time.Since(killed); d > time.Second {
		assert.Fail(t, fmt.Sprintf("synthetic terminal %v after the kill, want within 1 s", d))
	}
	wantSynthetic(t, term, frame.CodeUnreachable)
	var ce *frame.Error
	if _, err := c.Wait(); !errors.As(err, &ce) || !ce.Synthetic || ce.Code != frame.CodeUnreachable {
		require.FailNow(t, fmt.Sprintf("Wait: %v", err))
	}
	succeeds(t, h)
	if newPID := readyPID(t, h, 0); newPID == pid {
		require.FailNow(t, fmt.Sprintf("same pid after the restart"))
	}
	if r := h.Children()[0].Restarts; r != 1 {
		require.FailNow(t, fmt.Sprintf("restarts %d, want 1", r))
	}
}

func TestSIGSTOPHealthTimeout(t *testing.T) {
	sideBySide(t)
	cfg := fastHealth(realConfig())
	h, _ := testHost(t, cfg, time.Minute)
	pid := readyPID(t, h, 0)
	ctx := callCtx(t, 30*time.Second)
	c, err := h.Call(ctx, "sleep", frame.MustPayload(map[string]any{"ms": 20000}))
	require.NoError(t, err)
	if f, err := c.Recv(ctx); err != nil || f.Kind != frame.KindStarted {
		require.FailNow(t, fmt.Sprintf("Recv: %v %v", f.Kind, err))
	}
	stopped := time.Now()
	syscall.Kill(pid, syscall.SIGSTOP)
	term, _ := recvUntilTerminal(t, c, 10*time.Second)
	d := time.Since(stopped)
	wantSynthetic(t, term, frame.CodeUnreachable)
	// Detection happens HealthTimeout after the last pong, which came before
	// the stop; the margin is for a loaded machine.
	assert.Falsef(t, d > cfg.HealthTimeout+time.Second, "detected after %v, want within %v", d, cfg.HealthTimeout)
	assert.Truef(t, strings.Contains(term.Error.Message, "unhealthy"), "message %q does not say unhealthy", term.Error.Message)
	// SIGCONT does not bring the stale call back: the stopped child is
	// replaced by a new one, its call stays ended, and the next call runs on
	// the new child.
	syscall.Kill(pid, syscall.SIGCONT)
	if newPID := readyPID(t, h, pid); newPID == pid {
		require.FailNow(t, fmt.Sprintf("the stopped child %d is still the pool's child", pid))
	}
	if f, err := c.Recv(ctx); !errors.Is(err, io.EOF) {
		require.FailNow(t, fmt.Sprintf("Recv after the terminal: %v %v, want io.EOF", f.Kind, err))
	}
	succeeds(t, h)
}

func TestCrash(t *testing.T) {
	h, _ := testHost(t, fastHealth(realConfig()), time.Minute)
	ctx := callCtx(t, 30*time.Second)
	c, err := h.Call(ctx, "crash", frame.MustPayload(map[string]any{"after": 3}))
	require.NoError(t, err)
	term, n := recvUntilTerminal(t, c, 10*time.Second)
	wantSynthetic(t, term, frame.CodeUnreachable)
	require.Falsef(t, n > 3, "%d chunks before the crash, want at most 3", n)
	require.Falsef(t, term.Sequence != uint64(n)+1, "synthetic sequence %d after %d chunks", term.Sequence, n)
	succeeds(t, h)
	if info := h.Children()[0]; info.Restarts != 1 || !errors.Is(info.LastCause, ErrChildDied) {
		require.FailNow(t, fmt.Sprintf("children %+v", info))
	}
}

func TestStuckHandlerRecycled(t *testing.T) {
	cfg := fastHealth(realConfig())
	cfg.CancelGrace = 200 * time.Millisecond
	cfg.endGrace = 300 * time.Millisecond
	cfg.DrainGrace = 200 * time.Millisecond
	h, _ := testHost(t, cfg, time.Minute)
	pid := readyPID(t, h, 0)
	ctx := callCtx(t, 30*time.Second)
	c, err := h.Call(ctx, "sleep", frame.MustPayload(map[string]any{"ms": 4000, "ignore_cancel": true}))
	require.NoError(t, err)
	if f, err := c.Recv(ctx); err != nil || f.Kind != frame.KindStarted {
		require.FailNow(t, fmt.Sprintf("Recv: %v %v", f.Kind, err))
	}
	// Cancel once the handler runs (a cancel that overtakes the invoke ends
	// the call at once, with no handler to get stuck).
	waitFor(t, func() bool { return h.Children()[0].Streams == 1 })
	cancelled := time.Now()
	c.Cancel()
	term, _ := recvUntilTerminal(t, c, 10*time.Second)
	require.Falsef(t, term.Kind != frame.KindCancelled || term.Synthetic, "terminal %v synthetic=%v, want the child's cancelled", term.Kind, term.Synthetic)
	if d := time.Since(cancelled); d > cfg.CancelGrace+time.Second {
		assert.Fail(t, fmt.Sprintf("terminal after %v", d))
	}
	// The child reports the stuck handler; the host recycles it.
	newPID := readyPID(t, h, pid)
	require.False(t, newPID == pid, "not recycled")
	if info := h.Children()[0]; !strings.Contains(info.LastCause.Error(), "stuck") {
		require.FailNow(t, fmt.Sprintf("last cause %v", info.LastCause))
	}
	succeeds(t, h)
}

func TestDeadline(t *testing.T) {
	cfg := fastHealth(realConfig())
	cfg.CancelGrace = 300 * time.Millisecond
	// The handler that ignores its cancel sleeps on after its call's
	// terminal: Close's drain abandons it after DrainGrace plus
	// CancelGrace rather than waiting for its sleep to end.
	cfg.DrainGrace = 100 * time.Millisecond
	h, _ := testHost(t, cfg, time.Minute)
	for _, ignore := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		c, err := h.Call(ctx, "sleep", frame.MustPayload(map[string]any{"ms": 3000, "ignore_cancel": ignore}))
		require.NoError(t, err)
		start := time.Now()
		term, _ := recvUntilTerminal(t, c, 10*time.Second)
		cancel()
		// The child enforces timeout_ms itself; with ignore_cancel it writes
		// the terminal for its stuck handler after cancel_grace.
		require.Falsef(t, term.Kind != frame.KindFailed || term.Error.Code != frame.CodeTimeout || term.Synthetic, "ignore_cancel=%v: terminal %v %v synthetic=%v", ignore, term.Kind, term.Error, term.Synthetic)
		if d := time.Since(start); d > 5*time.Second {
			require.FailNow(t, fmt.Sprintf("timeout after %v", d))
		}
	}
}

func TestCancelByContext(t *testing.T) {
	h, _ := testHost(t, fastHealth(realConfig()), time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := h.Call(ctx, "sleep", frame.MustPayload(map[string]any{"ms": 10000}))
	require.NoError(t, err)
	c.Recv(callCtx(t, 5*time.Second))
	cancel()
	term, _ := recvUntilTerminal(t, c, 5*time.Second)
	require.Falsef(t, term.Kind != frame.KindCancelled || term.Synthetic, "terminal %v synthetic=%v", term.Kind, term.Synthetic)
	succeeds(t, h)
}

// rss returns a process's resident set in KiB.
func rss(t *testing.T, pid string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/status")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.Fields(rest)[0])
			return n
		}
	}
	return 0
}

func heapInuse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

func TestSlowConsumerBoundedMemory(t *testing.T) {
	h, _ := testHost(t, realConfig(), 2*time.Minute) // default health: no false alarm on a loaded machine
	pid := strconv.Itoa(readyPID(t, h, 0))
	ctx := callCtx(t, time.Minute)
	c, err := h.Call(ctx, "count", frame.MustPayload(map[string]any{"n": 1_000_000, "size": 100}))
	require.NoError(t, err)
	read := func(n int) {
		for range n {
			if f, err := c.Recv(ctx); err != nil || f.Kind.IsTerminal() {
				require.FailNow(t, fmt.Sprintf("Recv: %v %v", f.Kind, err))
			}
		}
	}
	read(1000)
	heap0, rss0, childRSS0 := heapInuse(), rss(t, "self"), rss(t, pid)
	time.Sleep(2 * time.Second) // the caller does not read: the child must block
	heap1, rss1, childRSS1 := heapInuse(), rss(t, "self"), rss(t, pid)
	read(100_000)
	heap2, rss2, childRSS2 := heapInuse(), rss(t, "self"), rss(t, pid)
	c.Cancel()
	term, _ := recvUntilTerminal(t, c, 10*time.Second)
	require.Falsef(t, term.Kind != frame.KindCancelled, "terminal %v %v", term.Kind, term.Error)
	t.Logf("host heap in use: %d KiB after 1k frames, %d KiB after a 2 s stall, %d KiB after 101k frames", heap0>>10, heap1>>10, heap2>>10)
	t.Logf("host RSS: %d / %d / %d KiB; child RSS: %d / %d / %d KiB", rss0, rss1, rss2, childRSS0, childRSS1, childRSS2)
	// A stalled consumer must not make either side buffer: allow slack for
	// the runtime, far below what 1,000,000 frames of ~120 bytes (120 MB)
	// would take.
	const slack = 16 << 20
	assert.Falsef(t, heap1 > heap0+slack || heap2 > heap0+slack, "host heap grew: %d → %d → %d bytes", heap0, heap1, heap2)
	assert.Falsef(t, childRSS1 > childRSS0+slack>>10 || childRSS2 > childRSS0+slack>>10, "child RSS grew: %d → %d → %d KiB", childRSS0, childRSS1, childRSS2)
	if os.Getenv("SKULK_PERF_OUT") != "" {
		writePerf(t, os.Getenv("SKULK_PERF_OUT"), heap0, heap1, heap2, rss0, rss1, rss2, childRSS0, childRSS1, childRSS2)
	}
}

// TestCancelUnreadSaysWhose: a call cancelled while its caller reads
// nothing, its output queue full, gets its synthetic cancelled after the
// cancel grace with a message that names the caller's unread output, not
// a child that gave no terminal (the child's terminal is queued behind
// that output).
func TestCancelUnreadSaysWhose(t *testing.T) {
	sideBySide(t)
	cfg := realConfig()
	cfg.CancelGrace = 100 * time.Millisecond
	h, _ := testHost(t, cfg, time.Minute)
	ctx := callCtx(t, 20*time.Second)
	c, err := h.Call(ctx, "count", frame.MustPayload(map[string]any{"n": 1_000_000, "size": 1000}))
	require.NoError(t, err)
	// The caller reads the first chunk, then nothing: the child's output
	// fills the socket. The cancel gives the connection to its reader,
	// which fills the call's queue and then waits for the caller.
	for f, err := c.Recv(ctx); f.Kind != frame.KindChunk; f, err = c.Recv(ctx) {
		require.NoError(t, err)
	}
	waitFor(t, func() bool { return socketQueued(t, c.conn) > 64<<10 })
	c.Cancel()
	waitFor(t, c.out.stalled)
	// Nor anything until the cancel clock has given up on the call.
	waitFor(t, c.conn.failed)
	// The call gives its stream slot back without being read.
	waitFor(t, func() bool { return h.Children()[0].Running == 0 })
	term, _ := recvUntilTerminal(t, c, 10*time.Second)
	if term.Kind != frame.KindCancelled || !term.Synthetic || term.Error == nil ||
		!strings.Contains(term.Error.Message, "the caller did not read") {
		require.FailNow(t, fmt.Sprintf("terminal %s synthetic=%v error=%v", term.Kind, term.Synthetic, term.Error))
	}
}

// socketQueued returns how many bytes wait in c's socket to be read.
func socketQueued(t *testing.T, c *streamConn) int {
	t.Helper()
	var n int32
	var errno syscall.Errno
	if err := c.rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
	}); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	require.EqualValues(t, 0, errno, errno)
	return int(n)
}
