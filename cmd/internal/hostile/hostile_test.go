package hostile_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/child/demotools"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/internal/testnet"
)

// fakeBin is internal/fakechild, the fake child, built once by TestMain.
var fakeBin string

// testHostEnv makes this test binary, re-executed, a host process
// (runTestHost): the value is the directory for the grandchildren's pid
// files.
const testHostEnv = "HOSTILE_TEST_HOST"

func TestMain(m *testing.M) {
	if dir, ok := os.LookupEnv(testHostEnv); ok {
		os.Exit(runTestHost(dir))
	}
	if spec, ok := os.LookupEnv(memHostEnv); ok {
		os.Exit(runMemHost(spec))
	}
	if _, ok := os.LookupEnv(sdkChildEnv); ok {
		runSDKChild()
	}
	dir, err := os.MkdirTemp("", "skulk-hostile-test-")
	if err == nil {
		err = os.Chmod(dir, 0o755) // the fake child runs as nobody too (TestRunAsCannotTouchTheHost)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fakeBin, err = testnet.Build(dir, "github.com/skulkrt/skulk/internal/fakechild")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	os.Setenv("HOSTILE_BIN", fakeBin) // for runTestHost
	testnet.QuickRaceExit()           // for this binary re-executed as a host (runMemHost)
	// Warm up the network poller so that its descriptors are not counted
	// as a leak by the first test.
	if ln, err := net.Listen("unix", filepath.Join(dir, "warm.sock")); err == nil {
		ln.Close()
	}
	goleak.VerifyTestMain(m, testnet.CleanupAndExit(func() { os.RemoveAll(dir) }))
}

// config runs the fake child in mode with health checks quick enough for
// tests and margins that hold on a loaded machine under -race.
func config(t *testing.T, mode string, pids string) host.Config {
	return host.Config{
		Command:        fakeBin,
		Args:           []string{mode},
		ExtraEnv:       []string{"FAKECHILD_PIDS=" + pids},
		HealthInterval: 100 * time.Millisecond,
		HealthTimeout:  2 * time.Second,
		KillGrace:      500 * time.Millisecond,
		DrainGrace:     200 * time.Millisecond,
		Restart:        host.RestartPolicy{MaxRestarts: 100, BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond},
		// Formatted and thrown away: the 64 MiB of stderr must not be
		// kept by the test's log sink.
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// startHost starts a host for t and registers its Close and the checks
// that nothing is left behind: no process of ours, no grandchild, no
// goroutine, no descriptor.
func startHost(t *testing.T, cfg host.Config) *host.Host {
	t.Helper()
	return startHosts(t, cfg)[0]
}

// startHosts is startHost for hosts that run at the same time in one test
// (one per config, each with a temporary directory of its own): the checks
// look at the whole test process, so they run once, after every host is
// closed.
func startHosts(t *testing.T, cfgs ...host.Config) []*host.Host {
	t.Helper()
	fds := countFDs(t)
	var hs []*host.Host
	var bases []string
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for _, h := range hs {
			h.Close(ctx)
		}
		if kids := processesWithParent(os.Getpid()); len(kids) > 0 {
			assert.Fail(t, fmt.Sprintf("processes of ours left after Close: %v", kids))
		}
		for _, base := range bases {
			if entries, _ := os.ReadDir(base); len(entries) > 0 {
				assert.Fail(t, fmt.Sprintf("left in the temp dir: %d entries", len(entries)))
			}
		}
		if n := countFDs(t); n != fds {
			assert.Fail(t, fmt.Sprintf("descriptors: %d before, %d after", fds, n))
		}
		goleak.VerifyNone(t)
		for _, base := range bases {
			os.RemoveAll(base)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, cfg := range cfgs {
		base, err := os.MkdirTemp("", "sk")
		require.NoError(t, err)
		bases = append(bases, base)
		cfg.TempDir = base
		h, err := host.Start(ctx, cfg)
		if err != nil {
			require.FailNow(t, fmt.Sprintf("Start: %v", err))
		}
		hs = append(hs, h)
	}
	return hs
}

func countFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(fds)
}

// stat is one process as /proc/PID/stat shows it.
type stat struct {
	pid, ppid, pgrp int
	state           byte
}

func readStat(pid int) (stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	ppid, _ := strconv.Atoi(f[1])
	pgrp, _ := strconv.Atoi(f[2])
	return stat{pid: pid, ppid: ppid, pgrp: pgrp, state: f[0][0]}, true
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	st, ok := readStat(pid)
	return ok && st.state != 'Z' && st.state != 'X'
}

func processesWithParent(ppid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok && st.ppid == ppid {
			out = append(out, pid)
		}
	}
	return out
}

// grandchildren returns the pids the grandchildren wrote to dir.
func grandchildren(t *testing.T, dir string) []int {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var pids []int
	for _, e := range entries {
		if rest, ok := strings.CutPrefix(e.Name(), "grandchild-"); ok && !strings.HasSuffix(rest, ".tmp") {
			if pid, err := strconv.Atoi(rest); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// waitGone waits up to limit until none of pids runs.
func waitGone(t *testing.T, pids []int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		var left []int
		for _, pid := range pids {
			if alive(pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, pid := range left {
				syscall.Kill(pid, syscall.SIGKILL) // do not leave them to the next test
			}
			require.FailNow(t, fmt.Sprintf("still running after %v: %v", limit, left))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// heapSampler records the largest heap in use while it runs.
type heapSampler struct {
	stop chan struct{}
	done chan struct{}
	base uint64
	peak uint64 // set before done is closed
}

func sampleHeap() *heapSampler {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := &heapSampler{stop: make(chan struct{}), done: make(chan struct{}), base: ms.HeapInuse, peak: ms.HeapInuse}
	go func() { // stopped by s.finish; waited for through done
		defer close(s.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
				runtime.ReadMemStats(&ms)
				s.peak = max(s.peak, ms.HeapInuse)
			}
		}
	}()
	return s
}

// finish stops the sampler and returns the peak growth over the base.
func (s *heapSampler) finish() uint64 {
	close(s.stop)
	<-s.done
	if s.peak < s.base {
		return 0
	}
	return s.peak - s.base
}

// heapBound is the heap growth a case may cause: generous for the
// runtime's slack and the outbox, far below what buffering a flood or the
// 64 MiB stderr line would take.
const heapBound = 24 << 20

// works makes one call of ok with one chunk and waits for its result: the
// next call after a hostile one works (on a restarted child if need be).
func works(t *testing.T, h *host.Host) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := h.Call(ctx, "ok", nil)
	require.NoError(t, err, "next call")
	require.NoError(t, c.Send(ctx, frame.MustPayload(map[string]any{"text": "hi"}), nil), "next call: Send")
	c.CloseSend()
	res, err := c.Wait()
	require.NoError(t, err, "next call")
	var v struct{ N int }
	if res.Decode(&v); v.N != 1 {
		require.FailNow(t, fmt.Sprintf("next call: result %s", res))
	}
}

// terminal reads c to its terminal.
func terminal(t *testing.T, c *host.Call, limit time.Duration) frame.Frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for {
		f, err := c.Recv(ctx)
		require.NoError(t, err, "Recv")
		if f.Kind.IsTerminal() {
			return f
		}
	}
}

// TestHostileChildren runs the hostile set against one host each. For
// every case: the host stays up, its heap stays within heapBound, the
// affected call ends with a typed synthetic terminal (or, where nothing
// is wrong with the call, completes), the next call works, and Close
// leaves no process, grandchild, goroutine or descriptor behind.
func TestHostileChildren(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tool   string
		kind   frame.Kind // the terminal's kind
		code   frame.Code // its code; 0 for a completed call
		stall  time.Duration
		gchild bool // the tool starts a setsid grandchild
	}{
		{"oversize packet on a stream", "oversize", frame.KindFailed, frame.CodeInvalidFrame, 0, false},
		{"garbage packet on a stream", "garbage", frame.KindFailed, frame.CodeInvalidFrame, 0, false},
		{"oversize packet on the control connection", "ctrloversize", frame.KindFailed, frame.CodeUnreachable, 0, false},
		{"garbage packet on the control connection", "ctrlgarbage", frame.KindFailed, frame.CodeUnreachable, 0, false},
		{"frames for an unknown call", "othercall", frame.KindFailed, frame.CodeInvalidFrame, 0, false},
		// The caller reads nothing for a second while the child floods,
		// then cancels; the child never reads the cancel, so the call
		// ends with the host's synthetic cancelled CancelGrace plus 1 s
		// later (the grace is short for the flood, whose length is not
		// what it checks).
		{"flood without reading", "flood", frame.KindCancelled, frame.CodeCancelled, time.Second, false},
		// The same with text chunks: the host keeps none of their text
		// beyond the call's bounded history, so the heap stays bounded.
		// The grace is the default: the text read flat out until the
		// host's cancelled (tens of MiB) is what the heap bound checks.
		{"text flood without reading", "textflood", frame.KindCancelled, frame.CodeCancelled, time.Second, false},
		{"never answers pings", "mute", frame.KindFailed, frame.CodeUnreachable, 0, false},
		// Stale pongs back to back keep bytes waiting for the host's
		// control reader at every look of the health timer; they hold
		// the verdict for one more health timeout at most.
		{"floods the control connection with stale pongs", "pongflood", frame.KindFailed, frame.CodeUnreachable, 0, false},
		{"closes fd 3 and keeps working", "closefd3", frame.KindFailed, frame.CodeUnreachable, 0, false},
		{"64 MiB of stderr without a newline", "stderrflood", frame.KindCompleted, 0, 0, false},
		{"forks a setsid grandchild and exits", "escapedie", frame.KindFailed, frame.CodeUnreachable, 0, true},
		{"forks a setsid grandchild and stays", "escape", frame.KindCompleted, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pids := t.TempDir()
			cfg := config(t, "serve", pids)
			if tc.tool == "flood" {
				cfg.CancelGrace = 100 * time.Millisecond
			}
			h := startHost(t, cfg)
			heap := sampleHeap()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := h.Call(ctx, tc.tool, nil, host.WithInput())
			require.NoError(t, err)
			if tc.stall > 0 {
				time.Sleep(tc.stall)
				c.Cancel()
			}
			term := terminal(t, c, 20*time.Second)
			growth := heap.finish()
			t.Logf("terminal %s synthetic=%v error=%v; heap grew %d KiB at most", term.Kind, term.Synthetic, term.Error, growth>>10)
			require.Falsef(t, term.Kind != tc.kind, "terminal %s, want %s", term.Kind, tc.kind)
			_, werr := c.Wait()
			if tc.code != 0 {
				var ce *frame.Error
				if !term.Synthetic || term.Error == nil || term.Error.Code != tc.code ||
					!errors.As(werr, &ce) || !ce.Synthetic || ce.Code != tc.code {
					require.FailNow(t, fmt.Sprintf("terminal synthetic=%v error=%v, Wait %v: want a synthetic %s", term.Synthetic, term.Error, werr, tc.code))
				}
			} else if werr != nil {
				require.FailNow(t, fmt.Sprintf("Wait: %v", werr))
			}
			assert.Falsef(t, growth > heapBound, "host heap grew by %d MiB, bound %d MiB", growth>>20, heapBound>>20)
			if tc.gchild {
				gc := grandchildren(t, pids)
				require.EqualValuesf(t, 1, len(gc), "grandchildren %v, want 1", gc)
				if tc.tool == "escapedie" {
					// Gone with its parent: killed when the child died,
					// before the slot took its next child.
					waitGone(t, gc, 2*time.Second)
				} else {
					works(t, h)
					require.NoError(t, h.Close(context.Background()), "Close")
					waitGone(t, gc, 2*time.Second) // killed with its parent at Close
					return
				}
			}
			works(t, h)
		})
	}
}

// TestGrandchildDoesNotHoldTheStop: a child that dies while a setsid
// grandchild holds its stdout and stderr is stopped without waiting for
// the pipes: the grandchild is killed first, so the pipes end at once and
// the slot's next child is ready well within the second the host would
// otherwise wait for them.
func TestGrandchildDoesNotHoldTheStop(t *testing.T) {
	pids := t.TempDir()
	h := startHost(t, config(t, "serve", pids))
	first := h.Children()[0].PID
	c, err := h.Call(context.Background(), "escapedie", nil, host.WithInput())
	require.NoError(t, err)
	term := terminal(t, c, 20*time.Second)
	died := time.Now()
	require.Falsef(t, !term.Synthetic || term.Error == nil || term.Error.Code != frame.CodeUnreachable, "terminal %s %v", term.Kind, term.Error)
	gc := grandchildren(t, pids)
	deadline := time.Now().Add(20 * time.Second)
	for {
		info := h.Children()[0]
		if info.State == "ready" && info.PID != first {
			break
		}
		require.Falsef(t, time.Now().After(deadline), "no new child: %+v", info)
		time.Sleep(2 * time.Millisecond)
	}
	restart := time.Since(died)
	for _, pid := range gc {
		assert.Falsef(t, alive(pid), "grandchild %d runs on after its child's slot restarted", pid)
	}
	t.Logf("next child ready %v after the terminal", restart)
	// One second is what the host gives pipes held by a process it
	// cannot see; a restart that waited for it would take longer.
	assert.Falsef(t, restart >= time.Second, "next child ready %v after the terminal: the stop waited for the pipes", restart)
}

// TestRecycleTakesTheGrandchild: a child that started a setsid grandchild
// and then reports a stuck handler is recycled (drained, not killed, and
// not counted against the restart policy); the grandchild is gone by the
// time the slot's next child is ready, and that child takes calls. The
// child completes its call first, so the stuck handler is seen at the
// host's next look at an idle child (IdleHealthInterval, short here).
func TestRecycleTakesTheGrandchild(t *testing.T) {
	pids := t.TempDir()
	cfg := config(t, "serve", pids)
	cfg.IdleHealthInterval = 200 * time.Millisecond
	h := startHost(t, cfg)
	first := h.Children()[0].PID
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := h.Call(ctx, "escapestuck", nil, host.WithInput())
	require.NoError(t, err)
	c.CloseSend()
	if term := terminal(t, c, 20*time.Second); term.Kind != frame.KindCompleted {
		require.FailNow(t, fmt.Sprintf("terminal %s %v, want completed", term.Kind, term.Error))
	}
	gc := grandchildren(t, pids)
	require.Falsef(t, len(gc) != 1 || !alive(gc[0]), "grandchildren %v, want 1 running", gc)
	var info host.ChildInfo
	for deadline := time.Now().Add(20 * time.Second); ; {
		info = h.Children()[0]
		if info.State == "ready" && info.PID != first {
			break
		}
		require.Falsef(t, time.Now().After(deadline), "no recycle: %+v", info)
		time.Sleep(2 * time.Millisecond)
	}
	// A recycle, not a death: the child drained and left when asked.
	for _, e := range []error{host.ErrChildDied, host.ErrUnhealthy, host.ErrChildLeft} {
		require.Falsef(t, info.LastCause == nil || errors.Is(info.LastCause, e), "the child stopped with %v, want a recycle", info.LastCause)
	}
	assert.Falsef(t, alive(first), "recycled child %d still runs", first)
	if alive(gc[0]) {
		syscall.Kill(gc[0], syscall.SIGKILL)
		require.FailNow(t, fmt.Sprintf("grandchild %d runs on after its child was recycled", gc[0]))
	}
	works(t, h)
}

// runTestHost is this test binary as a host process for
// TestHostKilledLeavesNothing: a pool of two fake children in mode ignorefd3
// children, each with a setsid grandchild. It prints "ready" once both
// grandchildren run and the host has looked at the children's trees a few
// times, then waits to be killed.
func runTestHost(dir string) int {
	switch os.Getenv(testHostModeEnv) {
	case "inflight":
		return runInFlightHost(dir)
	case "unprivileged":
		return runUnprivilegedHost(dir)
	}
	cfg := host.Config{
		Command: os.Getenv("HOSTILE_BIN"), Args: []string{"ignorefd3"}, PoolSize: 2,
		ExtraEnv: []string{"FAKECHILD_PIDS=" + dir}, TempDir: dir,
		HealthInterval: 50 * time.Millisecond, HealthTimeout: time.Minute,
		NoCgroups: os.Getenv(testHostModeEnv) == "nocgroups",
	}
	h, err := host.Start(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test host:", err)
		return 1
	}
	for {
		entries, _ := os.ReadDir(dir)
		n := 0
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "grandchild-") && !strings.HasSuffix(e.Name(), ".tmp") {
				n++
			}
		}
		if n == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // ten health checks, each a look at the trees
	fmt.Printf("ready %d %d\n", h.Children()[0].PID, h.Children()[1].PID)
	select {} // until SIGKILL
}

// TestHostKilledLeavesNothing: a host process killed with SIGKILL, whose
// children never read their control connection (so never see it end) and
// each run a setsid grandchild, leaves no process of its tree behind
// within 2 s: the children die with the host (parent-death signal), the
// grandchildren by the guardian (through the host's cgroup, or without
// cgroups by what the host told it of the children's trees).
func TestHostKilledLeavesNothing(t *testing.T) {
	t.Run("cgroups", func(t *testing.T) { hostKilledLeavesNothing(t, "") })
	t.Run("no cgroups", func(t *testing.T) { hostKilledLeavesNothing(t, "nocgroups") })
}

func hostKilledLeavesNothing(t *testing.T, mode string) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), testHostEnv+"="+dir, testHostModeEnv+"="+mode)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var once sync.Once
	reap := func() { once.Do(func() { cmd.Process.Kill(); cmd.Wait() }) }
	defer reap()
	line, err := bufio.NewReader(out).ReadString('\n')
	require.Falsef(t, err != nil || !strings.HasPrefix(line, "ready "), "the test host did not start: %q %v", line, err)
	tree := processesWithParent(cmd.Process.Pid) // the children and the guardian
	tree = append(tree, grandchildren(t, dir)...)
	require.Falsef(t, len(tree) < 4, "tree %v: want two children, two grandchildren", tree)
	for _, pid := range tree {
		require.Truef(t, alive(pid), "%d of %v not running before the kill", pid, tree)
	}
	t.Logf("host %d, its tree %v", cmd.Process.Pid, tree)
	killed := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	reap()
	// With cgroups the guardian kills the host's cgroup: 2 s is the
	// promise. Without, it scans /proc from a shell, which on a 2-core
	// machine at a load average of 20 and more takes longer.
	limit := 2 * time.Second
	if mode == "nocgroups" {
		limit = 15 * time.Second
	}
	waitGone(t, tree, limit)
	t.Logf("the whole tree gone %v after the kill", time.Since(killed))
}

// sdkChildEnv makes this test binary, re-executed, the Go SDK provider of
// TestHostileHost (runSDKChild).
const sdkChildEnv = "HOSTILE_TEST_SDK_CHILD"

// runSDKChild is this test binary as a well-behaved SDK provider
// (child.Run) with max_streams 4 and the demo tools with their test
// tools. It never returns: it exits with Run's status.
func runSDKChild() {
	os.Exit(child.Run(child.Options{
		SDK:        "hostile-sdk/1",
		MaxStreams: 4,
		Tools:      demotools.Tools(demotools.Options{TestTools: true, Exit: os.Exit}),
	}))
}

// A hostile host against the Go SDK: the child is this test binary as an
// SDK provider (runSDKChild: child.Run, max_streams 4, the demo tools),
// driven packet by packet. Under -race the child would pause a second at
// its exit for the race detector's report; GORACE takes the pause away.
// For each case the child stays up and answers pings, its memory stays
// bounded, and a call made afterwards works.
func TestHostileHost(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, p *testnet.Process)
	}{
		{"invokes beyond max_streams", func(t *testing.T, p *testnet.Process) {
			// Three times max_streams at once: the host is to enforce it,
			// the child serves them all (docs/protocol.md §6 item 1).
			var streams []*testnet.Stream
			for i := range 12 {
				s := dial(t, p)
				streams = append(streams, s)
				require.NoError(t, s.Request(fmt.Sprintf("m%d", i), "sleep", map[string]any{"ms": 200}))
			}
			for i, s := range streams {
				res, err := s.ReadCall(fmt.Sprintf("m%d", i), time.Now().Add(20*time.Second))
				require.Falsef(t, err != nil || res.Terminal == nil || res.Terminal.Kind != frame.KindCompleted, "call %d: %+v %v", i, res, err)
			}
		}},
		{"cancel storm", func(t *testing.T, p *testnet.Process) {
			s := dial(t, p)
			for i := range 200 {
				id := fmt.Sprintf("s%d", i)
				require.NoError(t, s.Invoke(id, "sleep", map[string]any{"ms": 10000}, 0))
				s.Started(id)
				for range 20 {
					p.Host.Cancel(id, "storm")
				}
				p.Host.Cancel(fmt.Sprintf("nosuch%d", i), "storm")
				s.CancelCall(id, 1)
				res, err := s.ReadCall(id, time.Now().Add(20*time.Second))
				require.Falsef(t, err != nil || res.Terminal == nil || res.Terminal.Kind != frame.KindCancelled, "call %d: %+v %v", i, res, err)
			}
		}},
		{"a peer that never reads", func(t *testing.T, p *testnet.Process) {
			s := dial(t, p)
			require.NoError(t, s.Request("r", "count", map[string]any{"n": 10_000_000, "size": 1000}))
			time.Sleep(2 * time.Second) // the child's writes block; its memory must not grow
			s.Close()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testnet.StartProcess(t, os.Args[0], []string{"-test.run=^$"},
				append(os.Environ(), sdkChildEnv+"=1", "GORACE=atexit_sleep_ms=0")...)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			hello, err := p.Host.Handshake(ctx, nil)
			require.Falsef(t, err != nil || hello.MaxStreams != 4, "handshake: %+v %v", hello, err)
			pid := strconv.Itoa(p.Cmd.Process.Pid)
			rss0 := rssKiB(t, pid)
			tc.run(t, p)
			if _, _, err := p.Host.Ping(ctx, 7); err != nil {
				require.FailNow(t, fmt.Sprintf("the child no longer answers pings: %v", err))
			}
			rss1 := rssKiB(t, pid)
			t.Logf("child RSS %d KiB → %d KiB", rss0, rss1)
			assert.Falsef(t, rss1 > rss0+heapBound>>10, "child RSS grew from %d to %d KiB", rss0, rss1)
			s := dial(t, p)
			require.NoError(t, s.Request("after", "count", map[string]any{"n": 3}))
			res, err := s.ReadCall("after", time.Now().Add(20*time.Second))
			require.Falsef(t, err != nil || res.Terminal == nil || res.Terminal.Kind != frame.KindCompleted || len(res.Chunks()) != 3, "next call: %+v %v", res, err)
		})
	}
}

func dial(t *testing.T, p *testnet.Process) *testnet.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := p.Host.Dial(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func rssKiB(t *testing.T, pid string) int {
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

// TestNoSubreaper: with Config.NoSubreaper the host process does not
// become a subreaper, and a setsid grandchild of a child that exits is
// still found and killed (init reaps it).
func TestNoSubreaper(t *testing.T) {
	pids := t.TempDir()
	cfg := config(t, "serve", pids)
	cfg.NoSubreaper = true
	h := startHost(t, cfg)
	require.False(t, subreaper(t), "the process is a subreaper with NoSubreaper")
	c, err := h.Call(context.Background(), "escapedie", nil, host.WithInput())
	require.NoError(t, err)
	if term := terminal(t, c, 20*time.Second); term.Error == nil || term.Error.Code != frame.CodeUnreachable {
		require.FailNow(t, fmt.Sprintf("terminal %s %v", term.Kind, term.Error))
	}
	waitGone(t, grandchildren(t, pids), 2*time.Second)
	works(t, h)
}

// TestSubreaperScoped: the process is a subreaper while a Host runs, and
// not once the last one closed.
func TestSubreaperScoped(t *testing.T) {
	h1 := startHost(t, config(t, "serve", t.TempDir()))
	cfg := config(t, "serve", t.TempDir())
	cfg.TempDir = t.TempDir()
	h2, err := host.Start(context.Background(), cfg)
	require.NoError(t, err)
	require.False(t, !subreaper(t), "not a subreaper while two hosts run")
	h2.Close(context.Background())
	require.False(t, !subreaper(t), "not a subreaper while one host runs")
	h1.Close(context.Background())
	require.False(t, subreaper(t), "still a subreaper once every host closed")
}

func subreaper(t *testing.T) bool {
	t.Helper()
	var v int32
	if _, _, errno := syscall.Syscall6(syscall.SYS_PRCTL, 37 /* PR_GET_CHILD_SUBREAPER */, uintptr(unsafe.Pointer(&v)), 0, 0, 0, 0); errno != 0 {
		require.FailNow(t, fmt.Sprint(errno))
	}
	return v != 0
}

// TestNoSubreaperBesideASubreaper: a Host with NoSubreaper in a process
// that another Host made a subreaper still reaps the descendants of its
// children the process adopted: no zombie of them is left.
func TestNoSubreaperBesideASubreaper(t *testing.T) {
	start := func(cfg host.Config) *host.Host {
		cfg.TempDir = t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		h, err := host.Start(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { h.Close(context.Background()) })
		return h
	}
	start(config(t, "serve", t.TempDir())) // the process is a subreaper
	pids := t.TempDir()
	cfg := config(t, "serve", pids)
	cfg.NoSubreaper = true
	h := start(cfg)
	require.False(t, !subreaper(t), "not a subreaper while a Host without NoSubreaper runs")
	c, err := h.Call(context.Background(), "escapedie", nil, host.WithInput())
	require.NoError(t, err)
	if term := terminal(t, c, 20*time.Second); term.Error == nil || term.Error.Code != frame.CodeUnreachable {
		require.FailNow(t, fmt.Sprintf("terminal %s %v", term.Kind, term.Error))
	}
	gc := grandchildren(t, pids)
	waitGone(t, gc, 2*time.Second)
	works(t, h) // the slot restarted: its old child's sweep is over
	for _, pid := range gc {
		if st, ok := readStat(pid); ok && st.ppid == os.Getpid() {
			assert.Fail(t, fmt.Sprintf("grandchild %d left as a process of ours in state %c", pid, st.state))
		}
	}
}
