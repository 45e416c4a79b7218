package remote

import (
	"io"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/internal/natstest"
	"github.com/skulkrt/skulk/remote/internal/message"
)

// A peer that spends its credit in one-byte data messages costs the
// receiver about its window, not an allocation and a slice per message;
// the bytes still read back in order, mixed with large messages.
func TestLinkQueueBoundedInBytes(t *testing.T) {
	const window = MinWindow
	nc, err := nats.Connect(natstest.Run(t).URL())
	require.NoError(t, err)
	defer nc.Close()
	l := newLink(nc, "t", window, 1024)
	l.accepted("peer", 0, 0)
	l.opened(nil)
	var want []byte
	seq := uint64(1)
	send := func(b []byte) {
		l.deliver(message.Append(nil, message.Message{Kind: message.KindData, Seq: seq, Body: b}))
		seq++
		want = append(want, b...)
	}
	for i := range window / 2 {
		send([]byte{byte(i)})
	}
	for i := range window / 2 / 2048 { // a large message after each small one
		send([]byte{byte(i)})
		big := make([]byte, 2047)
		big[0] = byte(i)
		send(big)
	}
	require.NoError(t, l.cause())
	require.Equal(t, uint64(len(want)), l.buffered())
	held := 0
	for _, q := range l.queue {
		held += cap(q) + 24
	}
	assert.LessOrEqual(t, held, window*5/4, "bytes held for %d stream bytes in %d messages", len(want), seq-1)

	got := make([]byte, 0, len(want))
	buf := make([]byte, 3000)
	for len(got) < len(want) {
		n, err := l.Read(buf)
		require.NoError(t, err)
		got = append(got, buf[:n]...)
	}
	assert.Equal(t, want, got)
	l.deliver(message.Append(nil, message.Message{Kind: message.KindFin, Seq: seq}))
	_, err = l.Read(buf)
	assert.ErrorIs(t, err, io.EOF)
}

// A caller's link takes nothing but an accept (or an abort) as the serving
// host's message 0: pings before an accept would keep a call that no host
// took alive forever.
func TestLinkNothingBeforeAccept(t *testing.T) {
	for _, k := range []message.Kind{message.KindPing, message.KindCredit, message.KindFin, message.KindCancel} {
		l := newLink(nil, "t", MinWindow, 1024)
		l.deliver(message.Append(nil, message.Message{Kind: k, Arg: map[message.Kind]uint64{message.KindCredit: 1}[k]}))
		assert.Equal(t, errUnwanted, l.cause(), "kind %d", k)
	}
	l := newLink(nil, "t", MinWindow, 1024)
	l.deliver(message.Append(nil, message.Message{Kind: message.KindAbort, Arg: 3, Body: []byte("closing")}))
	var le *linkError
	require.ErrorAs(t, l.cause(), &le)
	assert.Equal(t, "closing", le.msg)
}
