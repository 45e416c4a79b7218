package child_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/child/demotools"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/testnet"
	"github.com/skulkrt/skulk/skulktest"
	"github.com/skulkrt/skulk/wire"
	"github.com/stretchr/testify/require"
)

// childBin is cmd/skulk-child built once by TestMain.
var childBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "skulk-child-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	childBin, err = skulktest.BuildIn(dir, "github.com/skulkrt/skulk/cmd/skulk-child")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, testnet.CleanupAndExit(func() { os.RemoveAll(dir) }))
}

// wait bounds every wait of these tests: generous for a loaded machine
// under -race, and still a failure rather than a hang.
const wait = 10 * time.Second

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

// config says how to start a child for a test.
type config struct {
	startup *wire.Startup // nil: skulktest.DefaultStartup
	extra   []child.Tool  // tools added to the demo tools, in-process only (the binary ignores them)
	// listen wraps the stream listener Serve is given, in-process only;
	// nil leaves it as it is.
	listen func(child.Listener) child.Listener
}

// target is a way to run a child: in-process through child.Serve, or the
// built cmd/skulk-child binary.
type target struct {
	name string
	// start starts a child and does the handshake.
	start func(t *testing.T, cfg config) (*skulktest.Peer, *wire.Hello)
}

var targets = []target{
	{"serve", startServe},
	{"binary", startBinary},
}

// forEach runs f against every target.
func forEach(t *testing.T, f func(t *testing.T, tg target)) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) { f(t, tg) })
	}
}

// served is a child running in-process.
type served struct {
	host   *skulktest.Peer
	done   chan error // Serve's result
	cancel context.CancelFunc
}

func serveChild(t *testing.T, cfg config, opts child.Options) *served {
	t.Helper()
	hostEnd, childEnd := testnet.SocketPair(t)
	nl, path := testnet.Listen(t)
	ln := child.NewListener(nl.Accept, nl.Close)
	if cfg.listen != nil {
		ln = cfg.listen(ln)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{done: make(chan error, 1), cancel: cancel}
	go func() { s.done <- child.Serve(ctx, childEnd, ln, opts) }() // stopped by the cleanup below
	s.host = skulktest.NewPeer(hostEnd, path)
	t.Cleanup(func() {
		s.host.Close()
		cancel()
		select {
		case <-s.done:
		case <-time.After(wait):
			assert.Fail(t, "Serve did not return after its host went away")
		}
	})
	return s
}

func demoOptions(extra ...child.Tool) child.Options {
	tools := append(demotools.Tools(demotools.Options{TestTools: true}), extra...)
	return child.Options{Tools: tools}
}

func startServe(t *testing.T, cfg config) (*skulktest.Peer, *wire.Hello) {
	t.Helper()
	s := serveChild(t, cfg, demoOptions(cfg.extra...))
	hello, err := s.host.Handshake(ctxT(t), cfg.startup)
	require.NoError(t, err)
	return s.host, hello
}

func startBinary(t *testing.T, cfg config) (*skulktest.Peer, *wire.Hello) {
	t.Helper()
	p := skulktest.ExecPeer(t, childBin, []string{"--test-tools"})
	hello, err := p.Handshake(ctxT(t), cfg.startup)
	require.NoError(t, err, "child output: %s", p.Output())
	return p, hello
}

// dial opens a stream connection closed at the end of the test.
// forEachGraced runs f against each target started with a 100 ms cancel
// grace, with one stream connection dialled.
func forEachGraced(t *testing.T, f func(t *testing.T, h *skulktest.Peer, s *skulktest.StreamConn)) {
	st := skulktest.DefaultStartup()
	st.CancelGraceMS = 100
	forEach(t, func(t *testing.T, tg target) {
		h, _ := tg.start(t, config{startup: st})
		f(t, h, dial(t, h))
	})
}

func dial(t *testing.T, h *skulktest.Peer) *skulktest.StreamConn {
	t.Helper()
	s, err := h.Dial(ctxT(t))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func deadline() time.Time { return time.Now().Add(wait) }

// readCall reads a call's output and requires its end.
func readCall(t *testing.T, s *skulktest.StreamConn, callID string) *skulktest.Result {
	t.Helper()
	res, err := s.ReadCall(callID, deadline())
	require.NoError(t, err)
	require.True(t, res.End)
	return res
}

func payload(m map[string]any) frame.Payload { return frame.MustPayload(m) }

func decode(t *testing.T, p frame.Payload) map[string]any {
	t.Helper()
	m, err := p.Map()
	require.NoError(t, err)
	return m
}

// num reads a JSON number that msgpack decoded as some integer type.
func num(t *testing.T, v any) int64 {
	t.Helper()
	switch x := v.(type) {
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case int64:
		return x
	case uint8:
		return int64(x)
	case uint16:
		return int64(x)
	case uint32:
		return int64(x)
	case uint64:
		return int64(x)
	case float64:
		return int64(x)
	}
	require.FailNow(t, fmt.Sprintf("not a number: %T", v))
	return 0
}

// requireTerminal checks the terminal's kind and error code (0 for none).
func requireTerminal(t *testing.T, res *skulktest.Result, kind frame.Kind, code frame.Code) {
	t.Helper()
	require.NotNil(t, res.Terminal, "no terminal")
	require.Equal(t, kind, res.Terminal.Kind, "terminal %+v", res.Terminal)
	if code != 0 {
		require.NotNil(t, res.Terminal.Error)
		require.Equal(t, code, res.Terminal.Error.Code, "message %q", res.Terminal.Error.Message)
	}
}

// pingUntil pings until cond holds for the pong, or fails the test.
func pingUntil(t *testing.T, h *skulktest.Peer, cond func(*wire.Pong) bool) *wire.Pong {
	t.Helper()
	ctx := ctxT(t)
	for n := uint64(1000); ; n++ {
		pong, _, err := h.Ping(ctx, n)
		require.NoError(t, err)
		if cond(pong) {
			return pong
		}
		select {
		case <-ctx.Done():
			require.FailNow(t, fmt.Sprintf("condition never held; last pong %+v", pong))
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// gate is a test handler's switch, closed once.
type gate struct {
	once sync.Once
	ch   chan struct{}
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// begin invokes tool with args (no timeout) on s and sends the caller's
// started frame.
func begin(t *testing.T, s *skulktest.StreamConn, callID, tool string, args map[string]any) {
	t.Helper()
	require.NoError(t, s.Invoke(callID, tool, args, 0))
	require.NoError(t, s.Started(callID))
}

// beginSleep begins a one-minute sleep call on s and waits until the
// child counts it as its only stream.
func beginSleep(t *testing.T, h *skulktest.Peer, s *skulktest.StreamConn, callID string) {
	t.Helper()
	begin(t, s, callID, "sleep", map[string]any{"ms": 60_000})
	pingUntil(t, h, func(p *wire.Pong) bool { return p.Streams == 1 })
}

// requireCountCompletes runs a one-chunk count call on s to its completed
// terminal: the connection still serves calls.
func requireCountCompletes(t *testing.T, s *skulktest.StreamConn, callID string) {
	t.Helper()
	begin(t, s, callID, "count", map[string]any{"n": 1})
	require.NoError(t, s.Complete(callID, 1, nil))
	requireTerminal(t, readCall(t, s, callID), frame.KindCompleted, 0)
}

// result waits for Serve's result, failing the test after wait, and puts
// it back for the cleanup.
func (s *served) result(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.done:
		s.done <- err
		return err
	case <-time.After(wait):
		require.FailNow(t, "Serve did not return")
		return nil
	}
}
