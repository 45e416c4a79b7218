package testnet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/wire"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(leakyMainEnv) != "" {
		goleak.VerifyTestMain(leakyRun{}, CleanupAndExit(func() { fmt.Println("cleaned up") }))
		return
	}
	goleak.VerifyTestMain(m)
}

// leakyMainEnv makes this test binary a TestMain whose tests pass and
// leave a goroutine running (TestCleanupAndExitFailsOnLeak).
const leakyMainEnv = "TESTNET_LEAKY_MAIN"

// leakyRun passes and leaves a goroutine blocked for good.
type leakyRun struct{}

func (leakyRun) Run() int {
	go func() { select {} }()
	return 0
}

// TestCleanupAndExitFailsOnLeak: a goroutine left after tests that passed
// makes VerifyTestMain with CleanupAndExit exit 1, after its clean-up ran.
func TestCleanupAndExitFailsOnLeak(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), leakyMainEnv+"=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "output: %s", out)
	require.Equal(t, 1, ee.ExitCode(), "output: %s", out)
	require.Contains(t, string(out), "goleak: Errors on successful test run")
	require.Contains(t, string(out), "cleaned up")
}

func TestListenIsPrivate(t *testing.T) {
	ln, path := Listen(t)
	fi, err := os.Stat(filepath.Dir(path))
	require.NoError(t, err)
	if fi.Mode().Perm() != 0o700 {
		require.FailNow(t, fmt.Sprintf("dir mode %v", fi.Mode().Perm()))
	}
	if filepath.Base(path) != "streams.sock" || ln.Addr().String() != path {
		require.FailNow(t, fmt.Sprintf("listener at %s", ln.Addr()))
	}
}

func TestHostOverSocketPair(t *testing.T) {
	a, b := SocketPair(t)
	h := NewHost(a, "")
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Play the child on b: hello, then a pong for the ping.
	cw := func(p wire.Packet) error { return packetio.WritePacket(b, p, wire.Limits{}) }
	require.NoError(t, cw(&wire.Hello{Protocol: []int64{1}, SDK: "t", PID: 1, MaxStreams: 1}))
	if _, err := h.Handshake(ctx, nil); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	r := packetio.NewReader(b, wire.Limits{})
	p, err := r.ReadPacket()
	require.Falsef(t, err != nil || packetio.TypeOf(p) != protocol.TypeStartup, "got %v, %v", p, err)
	pongs := make(chan error, 1)
	go func() {
		p, err := r.ReadPacket()
		if err == nil {
			err = cw(&wire.Bye{})
			if err == nil {
				err = cw(&wire.Pong{Nonce: p.(*wire.Ping).Nonce})
			}
		}
		pongs <- err
	}()
	pong, _, err := h.Ping(ctx, 42)
	require.Falsef(t, err != nil || pong.Nonce != 42, "pong %v, %v", pong, err)
	require.NoError(t, <-pongs)
	if _, err := h.WaitBye(ctx); err != nil { // kept aside by Ping
		require.FailNow(t, fmt.Sprint(err))
	}
	b.Close()
	require.NoError(t, h.WaitClosed(ctx))
}

// TestHostToolsOffered: a tools packet reaches the test host after a
// startup with ToolsUpdates, and is a protocol error
// (wire.ErrProtocol) after one without.
func TestHostToolsOffered(t *testing.T) {
	for _, offered := range []bool{true, false} {
		a, b := SocketPair(t)
		h := NewHost(a, "")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cw := func(p wire.Packet) error { return packetio.WritePacket(b, p, wire.Limits{}) }
		require.NoError(t, cw(&wire.Hello{Protocol: []int64{1}, SDK: "t", PID: 1, MaxStreams: 1, Tools: []wire.Tool{{ID: "a"}}}))
		st := DefaultStartup()
		st.ToolsUpdates = offered
		_, err := h.Handshake(ctx, st)
		require.NoError(t, err)
		got, err := packetio.NewReader(b, wire.Limits{}).ReadPacket()
		require.NoError(t, err)
		require.Equal(t, offered, got.(*wire.Startup).ToolsUpdates)
		require.NoError(t, cw(&wire.Tools{Tools: []wire.Tool{{ID: "b"}}}))
		p, err := h.Next(ctx)
		if offered {
			require.NoError(t, err)
			require.Equal(t, &wire.Tools{Tools: []wire.Tool{{ID: "b"}}}, p)
		} else {
			require.ErrorIs(t, err, wire.ErrProtocol)
			require.ErrorIs(t, err, wire.ErrProtocol)
		}
		cancel()
		b.Close()
		h.Close()
	}
}
