package wire

import (
	"bytes"
	"net"
	"testing"

	"github.com/skulkrt/skulk/frame"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRoundTripOverSocket(t *testing.T) {
	ua, ub := socketPair(t)
	defer ua.Close()
	defer ub.Close()
	w := NewWriter(ua, Limits{})
	defer w.Close()
	r := NewReader(ub, Limits{})
	data := bytes.Repeat([]byte{7}, 1<<20)
	chunk, err := frame.NewChunk("c1", frame.ProviderToCaller, 1, frame.MustPayload(map[string]any{"text": "hi"}),
		&frame.InlineMedia{Data: data, MediaType: "application/octet-stream"})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		for _, p := range []Packet{&Ping{Nonce: 9}, &Frame{chunk}, &End{frame.End{CallID: "c1"}}} {
			if err := w.WritePacket(p); err != nil {
				done <- err
				return
			}
		}
		done <- w.Flush()
	}()
	p, err := r.ReadPacket()
	require.NoError(t, err)
	require.Equal(t, uint64(9), p.(*Ping).Nonce)
	p, err = r.ReadPacket()
	require.NoError(t, err)
	f := p.(*Frame)
	require.Equal(t, data, f.Media.(*frame.InlineMedia).Data)
	txt, ok := f.Payload.Text()
	require.True(t, ok)
	require.Equal(t, "hi", txt)
	p, err = r.ReadPacket()
	require.NoError(t, err)
	require.Equal(t, "c1", p.(*End).CallID)
	require.NoError(t, <-done)
}

func socketPair(t testing.TB) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	dir := t.TempDir()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: dir + "/s", Net: "unix"})
	require.NoError(t, err)
	defer l.Close()
	c, err := net.DialUnix("unix", nil, l.Addr().(*net.UnixAddr))
	require.NoError(t, err)
	s, err := l.AcceptUnix()
	require.NoError(t, err)
	return c, s
}
