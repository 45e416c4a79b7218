package remote

import (
	"io"
	"slices"
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
	l.caller = true // it reads a serving host's stream, to its fin
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
		l.caller = true
		l.deliver(message.Append(nil, message.Message{Kind: k, Arg: map[message.Kind]uint64{message.KindCredit: 1}[k]}))
		assert.Equal(t, errUnwanted, l.cause(), "kind %d", k)
	}
	l := newLink(nil, "t", MinWindow, 1024)
	l.caller = true
	l.deliver(message.Append(nil, message.Message{Kind: message.KindAbort, Arg: 3, Body: []byte("closing")}))
	var le *linkError
	require.ErrorAs(t, l.cause(), &le)
	assert.Equal(t, "closing", le.msg)
}

// A message of a kind that flows only one way, arriving the other way,
// ends that link with errWrongWay: open and cancel at a caller's link,
// accept, fin and tree at a serving host's. The kinds that flow both
// ways pass on either side.
func TestLinkWrongWay(t *testing.T) {
	nc, err := nats.Connect(natstest.Run(t).URL())
	require.NoError(t, err)
	defer nc.Close()
	msgs := map[message.Kind]message.Message{
		message.KindOpen:   {Kind: message.KindOpen, Arg: 1},
		message.KindAccept: {Kind: message.KindAccept, Arg: 1, Body: []byte("skulk.x.h.y.z")},
		message.KindCancel: {Kind: message.KindCancel},
		message.KindFin:    {Kind: message.KindFin},
		message.KindTree:   {Kind: message.KindTree, Body: []byte("t-1")},
		message.KindPing:   {Kind: message.KindPing},
		message.KindCredit: {Kind: message.KindCredit, Arg: 1 << 30},
		message.KindData:   {Kind: message.KindData, Body: []byte("x")},
	}
	wrong := map[bool][]message.Kind{
		true:  {message.KindOpen, message.KindCancel},
		false: {message.KindAccept, message.KindFin, message.KindTree},
	}
	for _, caller := range []bool{true, false} {
		for k, m := range msgs {
			l := newLink(nc, "t", MinWindow, 1024)
			l.caller = caller
			l.accepted("peer.subject", 0, 0) // past the accept on either side
			l.opened(nil)
			if k == message.KindOpen || k == message.KindAccept {
				l.inSeq = 0 // they are message 0 only
			} else {
				m.Seq = 1
			}
			l.deliver(message.Append(nil, m))
			if slices.Contains(wrong[caller], k) {
				assert.Same(t, errWrongWay, l.cause(), "%s at the caller's side: %v", k, caller)
			} else if k != message.KindOpen && k != message.KindAccept {
				assert.NoError(t, l.cause(), "%s at the caller's side: %v", k, caller)
			}
		}
	}
}
