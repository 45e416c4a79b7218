package testnet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/wire"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
