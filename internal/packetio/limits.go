package packetio

import (
	"encoding/binary"
	"io"

	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/wire"
)

// DefaultLimits returns the protocol's default limits: 64 KiB of header,
// 16 MiB of attachment.
func DefaultLimits() wire.Limits {
	return wire.Limits{MaxHeader: protocol.DefaultMaxHeader, MaxAttachment: protocol.DefaultMaxAttachment}
}

// Effective returns l with zero fields replaced by the defaults and every
// field clamped to its hard ceiling (protocol.HardMaxHeader,
// protocol.HardMaxAttachment).
func Effective(l wire.Limits) wire.Limits {
	return wire.Limits{MaxHeader: protocol.EffectiveHeader(l.MaxHeader), MaxAttachment: protocol.EffectiveAttachment(l.MaxAttachment)}
}

// MinLimits returns the smaller of each effective limit of a and b: the
// limits both sides agree on in the handshake.
func MinLimits(a, b wire.Limits) wire.Limits {
	a, b = Effective(a), Effective(b)
	return wire.Limits{MaxHeader: min(a.MaxHeader, b.MaxHeader), MaxAttachment: min(a.MaxAttachment, b.MaxAttachment)}
}

// CheckLengths checks a packet's header length h and attachment length a,
// as its prefix declares them, against l (already Effective): nil, or the
// codec's protocol error for them (errors.Is(err, wire.ErrProtocol)),
// which also matches wire.ErrTooLarge for a length above its limit; a
// header length of 0 is out of bounds too. A reader checks them before it
// reads or allocates anything for the packet. The error is the one
// wire.Decode gives for the packet, which it finds by decoding the prefix
// alone: Decode checks the lengths before it looks at anything else.
func CheckLengths(h, a uint32, l wire.Limits) error {
	if h != 0 && h <= l.MaxHeader && a <= l.MaxAttachment {
		return nil
	}
	var prefix [protocol.PrefixLen]byte
	binary.BigEndian.PutUint32(prefix[:], h)
	binary.BigEndian.PutUint32(prefix[4:], a)
	_, err := wire.Decode(prefix[:], l)
	return err
}

// TypeOf returns p's packet type, 0 for nil.
func TypeOf(p wire.Packet) protocol.Type {
	switch p.(type) {
	case *wire.Hello:
		return protocol.TypeHello
	case *wire.Startup:
		return protocol.TypeStartup
	case *wire.Ping:
		return protocol.TypePing
	case *wire.Pong:
		return protocol.TypePong
	case *wire.Cancel:
		return protocol.TypeCancel
	case *wire.Drain:
		return protocol.TypeDrain
	case *wire.Bye:
		return protocol.TypeBye
	case *wire.Invoke:
		return protocol.TypeInvoke
	case *wire.Frame:
		return protocol.TypeFrame
	case *wire.End:
		return protocol.TypeEnd
	case *wire.Tools:
		return protocol.TypeTools
	}
	return 0
}

// WritePacket encodes p (refused over l) and writes it whole to w with one
// Write: for test kits and tools that write a packet now and then. One
// Write of a net.Conn or an *os.File is not interleaved with another's, so
// goroutines may share w. Connections of the host and the child write
// through internal/coalesce, the module's one packet writer, which writes
// the attachment without copying it and coalesces the packets queued while
// a write is under way. Errors: Encode's, or w's.
func WritePacket(w io.Writer, p wire.Packet, l wire.Limits) error {
	b, err := Encode(p, l)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// Encode encodes p whole (prefix, header, attachment) into a new slice, for
// tests and test kits that write a packet with one Write; connections
// write through internal/coalesce, which appends into buffers it reuses
// (wire.AppendPacket). Its errors are wire.AppendPacket's.
func Encode(p wire.Packet, l wire.Limits) ([]byte, error) {
	b, att, err := wire.AppendPacket(nil, p, l)
	if err != nil {
		return nil, err
	}
	return append(b, att...), nil
}
