package host

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/protocol"
)

func TestPoolLeastLoadedAndMaxStreams(t *testing.T) {
	cfg := fastHealth(fakeConfig("serve"))
	cfg.PoolSize = 2
	h, _ := testHost(t, cfg, time.Minute)
	ctx := callCtx(t, 30*time.Second)
	var calls []*Call
	open := func() {
		c, err := h.Call(ctx, "ok", nil)
		require.NoError(t, err)
		calls = append(calls, c)
	}
	open()
	open()
	if ch := h.Children(); ch[0].Running != 1 || ch[1].Running != 1 {
		require.FailNow(t, fmt.Sprintf("two calls not spread over two children: %+v", ch))
	}
	for range 6 { // the fake child's max_streams is 4
		open()
	}
	if ch := h.Children(); ch[0].Running != 4 || ch[1].Running != 4 {
		require.FailNow(t, fmt.Sprintf("running %+v", ch))
	}
	// A ninth call waits for a slot, bounded by its context.
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := h.Call(short, "ok", nil); !errors.Is(err, context.DeadlineExceeded) {
		require.FailNow(t, fmt.Sprintf("ninth call: %v", err))
	}
	// It gets the slot as soon as one is freed.
	got := make(chan error, 1)
	go func() { // ends with the call; waited for below
		c, err := h.Call(ctx, "ok", nil)
		if err == nil {
			c.CloseSend()
			_, err = c.Wait()
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond) // let it wait (not a synchronisation: the result is checked either way)
	calls[0].CloseSend()
	if _, err := calls[0].Wait(); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	require.NoError(t, <-got, "waiting call")
	for _, c := range calls[1:] {
		c.CloseSend()
		if _, err := c.Wait(); err != nil {
			require.FailNow(t, fmt.Sprint(err))
		}
	}
}

// Close drains: a call running on the real child finishes normally.
func TestCloseDrainsRunningCalls(t *testing.T) {
	cfg := fastHealth(realConfig())
	h, _ := testHost(t, cfg, time.Minute)
	ctx := callCtx(t, 30*time.Second)
	c, err := h.Call(ctx, "sleep", frame.MustPayload(map[string]any{"ms": 300}))
	require.NoError(t, err)
	waitFor(t, func() bool { return h.Children()[0].Streams == 1 })
	closed := make(chan error, 1)
	go func() { closed <- h.Close(ctx) }() // returns once the child is drained; waited for below
	res, err := c.Wait()
	require.NoError(t, err, "call during Close")
	require.False(t, res == nil, "no result")
	require.NoError(t, <-closed, "Close")
	if _, err := h.Call(ctx, "sleep", nil); !errors.Is(err, ErrClosed) {
		require.FailNow(t, fmt.Sprintf("Call after Close: %v", err))
	}
}

// Child output reaches the logger line by line, tagged with id and pid,
// as Config.Logger says.
func TestChildLogsForwarded(t *testing.T) {
	h, logs := testHost(t, fastHealth(fakeConfig("serve")), time.Minute)
	pid := readyPID(t, h, 0)
	c, err := h.Call(callCtx(t, 30*time.Second), "die", nil)
	require.NoError(t, err)
	c.Wait()
	waitFor(t, func() bool { return strings.Contains(logs.String(), "fake: dying on purpose") })
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "fake: dying on purpose") {
			for _, want := range []string{`level=INFO msg="child output"`, "child=c0.1", "pid=" + strconv.Itoa(pid), "stream=stderr"} {
				require.Truef(t, strings.Contains(line, want), "log line %q lacks %q", line, want)
			}
		}
	}
}

// Zero fields mean what their docs say.
func TestConfigDefaults(t *testing.T) {
	c := Config{Command: "x"}.withDefaults()
	want := Config{Command: "x", PoolSize: 1, Limits: c.Limits,
		HealthInterval: time.Second, HealthTimeout: 5 * time.Second, IdleHealthInterval: 30 * time.Second, StartTimeout: 10 * time.Second,
		CancelGrace: time.Second, endGrace: 2 * time.Second, KillGrace: 2 * time.Second, DrainGrace: 5 * time.Second,
		StuckLimit: 1, Logger: c.Logger, Env: slices.Clone(defaultEnv),
		Calls:   Calls{MaxDepth: defaultMaxDepth, MaxInFlight: defaultMaxInFlight, DetachedTimeout: 10 * time.Minute},
		Restart: RestartPolicy{MaxRestarts: 5, Window: time.Minute, BackoffMin: 100 * time.Millisecond, BackoffMax: 10 * time.Second},
	}
	require.Truef(t, reflect.DeepEqual(c, want), "defaults\n%+v, want\n%+v", c, want)
	require.Falsef(t, c.Limits != packetio.DefaultLimits() || c.Logger == nil, "limits %+v, logger %v", c.Limits, c.Logger)
	if d := time.Duration(protocol.DefaultCancelGraceMS) * time.Millisecond; c.CancelGrace != d {
		require.FailNow(t, fmt.Sprintf("CancelGrace %v, the protocol's default %v", c.CancelGrace, d))
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no command", Config{}},
		{"negative pool", Config{Command: "x", PoolSize: -1}},
		{"timeout below interval", Config{Command: "x", HealthInterval: time.Second, HealthTimeout: time.Second}},
		{"negative duration", Config{Command: "x", KillGrace: -1}},
		{"negative idle interval", Config{Command: "x", IdleHealthInterval: -1}},
		{"bad env", Config{Command: "x", ExtraEnv: []string{"=v"}}},
	} {
		if err := tc.cfg.validate(); !errors.Is(err, ErrConfig) {
			assert.Fail(t, fmt.Sprintf("%s: %v", tc.name, err))
		}
	}
	assert.NoError(t, (&Config{Command: "x"}).validate(), "zero config")
}

// Close is bounded even when a caller stopped reading a long stream.
func TestCloseWithStalledCaller(t *testing.T) {
	sideBySide(t)
	cfg := fastHealth(realConfig())
	cfg.DrainGrace = 300 * time.Millisecond
	h, _ := testHost(t, cfg, time.Minute)
	ctx := callCtx(t, 30*time.Second)
	c, err := h.Call(ctx, "count", frame.MustPayload(map[string]any{"n": 1_000_000}))
	require.NoError(t, err)
	for range 10 {
		if _, err := c.Recv(ctx); err != nil {
			require.FailNow(t, fmt.Sprint(err))
		}
	}
	start := time.Now()
	h.Close(ctx)
	if d := time.Since(start); d > 5*time.Second {
		require.FailNow(t, fmt.Sprintf("Close took %v", d))
	}
	term, _ := recvUntilTerminal(t, c, 5*time.Second)
	require.Falsef(t, !term.Kind.IsTerminal() || term.Kind == frame.KindCompleted, "terminal %v", term.Kind)
}

// Recv's own context bounds the wait without ending the call.
func TestRecvContext(t *testing.T) {
	h, _ := testHost(t, fastHealth(fakeConfig("serve")), time.Minute)
	ctx := callCtx(t, 30*time.Second)
	c, err := h.Call(ctx, "ok", nil)
	require.NoError(t, err)
	c.Recv(ctx) // started
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c.Recv(short); !errors.Is(err, context.DeadlineExceeded) {
		require.FailNow(t, fmt.Sprintf("Recv: %v", err))
	}
	okRoundTrip(t, c, "still there")
	c.CloseSend()
	if _, err := c.Wait(); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
}

func TestNeverRestart(t *testing.T) {
	cfg := fastHealth(fakeConfig("serve"))
	cfg.Restart.MaxRestarts = -1
	h, _ := testHost(t, cfg, time.Minute)
	c, err := h.Call(callCtx(t, 30*time.Second), "die", nil)
	require.NoError(t, err)
	c.Wait()
	waitFor(t, func() bool { return h.Children()[0].State == "down" })
	_, err = h.Call(callCtx(t, 5*time.Second), "ok", nil)
	require.Falsef(t, !errors.Is(err, ErrPoolDown) || !errors.Is(err, ErrChildDied), "Call: %v", err)
}

// A Send blocked by backpressure ends with its context; the call ends too.
func TestSendContext(t *testing.T) {
	h, _ := testHost(t, fastHealth(realConfig()), time.Minute)
	ctx := callCtx(t, 30*time.Second)
	// sleep never reads its input: a large frame fills the socket and blocks.
	c, err := h.Call(ctx, "sleep", frame.MustPayload(map[string]any{"ms": 20000}))
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	// The child queues 8 frames, the sockets hold a few more; then Send blocks.
	data := make([]byte, 1<<20)
	for i := 0; ; i++ {
		err := c.Send(short, nil, &frame.InlineMedia{Data: data, MediaType: "application/octet-stream"})
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		require.Falsef(t, err != nil || i == 100, "Send %d: %v", i, err)
	}
	term, _ := recvUntilTerminal(t, c, 5*time.Second)
	require.Falsef(t, !term.Synthetic || term.Kind != frame.KindCancelled, "terminal %v synthetic=%v", term.Kind, term.Synthetic)
	if err := c.Send(ctx, frame.MustPayload(map[string]any{"a": 1}), nil); !errors.Is(err, ErrSendClosed) {
		require.FailNow(t, fmt.Sprintf("Send after: %v", err))
	}
	succeeds(t, h)
	// The host cancels the abandoned handler over the control connection.
	waitFor(t, func() bool { return h.Children()[0].Streams == 0 })
}
