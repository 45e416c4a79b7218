package protocol

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/frame/mpack"
	"github.com/skulkrt/skulk/wire"
)

// The numbers here are the codec's own (wire/internal/protocol), which
// this package cannot import: they are checked against what wire does.

func TestLimitsAgreeWithWire(t *testing.T) {
	for _, c := range []struct {
		name        string
		l           wire.Limits
		header, att uint32 // the largest lengths l takes
	}{
		{"defaults", wire.Limits{}, DefaultMaxHeader, DefaultMaxAttachment},
		{"hard ceilings", wire.Limits{MaxHeader: 1 << 31, MaxAttachment: 1 << 31}, HardMaxHeader, HardMaxAttachment},
		{"configured", wire.Limits{MaxHeader: 100, MaxAttachment: 200}, 100, 200},
	} {
		require.NotErrorIs(t, decodePrefix(c.header, c.att, c.l), wire.ErrTooLarge, c.name)
		require.ErrorIs(t, decodePrefix(c.header+1, 0, c.l), wire.ErrTooLarge, c.name)
		require.ErrorIs(t, decodePrefix(1, c.att+1, c.l), wire.ErrTooLarge, c.name)
		require.Equal(t, c.header, EffectiveHeader(c.l.MaxHeader), c.name)
		require.Equal(t, c.att, EffectiveAttachment(c.l.MaxAttachment), c.name)
	}
	err := decodePrefix(0, 0, wire.Limits{})
	require.ErrorIs(t, err, wire.ErrProtocol, "a header length of 0")
	require.NotErrorIs(t, err, wire.ErrTooLarge, "a header length of 0")
}

// decodePrefix decodes a packet's prefix alone, declaring lengths h and a:
// wire.Decode checks the lengths against l first, so the error is the
// length error when one is out of bounds (and another protocol error,
// for a packet shorter than its prefix declares, when they are not).
func decodePrefix(h, a uint32, l wire.Limits) error {
	var b [PrefixLen]byte
	binary.BigEndian.PutUint32(b[:], h)
	binary.BigEndian.PutUint32(b[4:], a)
	_, err := wire.Decode(b[:], l)
	return err
}

func TestPrefixLenAgreesWithWire(t *testing.T) {
	hdr, att, err := wire.AppendPacket(nil, &wire.Ping{Nonce: 7}, wire.Limits{})
	require.NoError(t, err)
	require.Empty(t, att)
	require.Greater(t, len(hdr), PrefixLen)
	require.Equal(t, uint32(len(hdr)-PrefixLen), binary.BigEndian.Uint32(hdr), "header length")
	require.Zero(t, binary.BigEndian.Uint32(hdr[4:PrefixLen]), "attachment length")
}

func TestTypeNames(t *testing.T) {
	for ty := TypeHello; ty <= TypeTools; ty++ {
		require.Equal(t, ty, ParseType(ty.String()))
	}
	require.Zero(t, ParseType("Type(0)"))
	require.Zero(t, ParseType(""))
	require.Equal(t, "Type(12)", Type(12).String())
}

// AsInvalid finds wire's invalid-packet error, read or refused, and
// nothing else.
func TestAsInvalid(t *testing.T) {
	f, err := frame.NewChunk("call-9", frame.ProviderToCaller, 1, frame.MustPayload(map[string]any{"i": 1}), nil)
	require.NoError(t, err)
	f.Sequence = 0 // breaks the rules; still encodes as a frame would
	_, _, err = wire.AppendPacket(nil, &wire.Frame{Frame: f}, wire.Limits{})
	inv, ok := AsInvalid(err)
	require.True(t, ok, "an invalid frame refused by the encoder: %v", err)
	require.Equal(t, TypeFrame, inv.Type)
	require.Equal(t, "call-9", inv.CallID)
	require.ErrorIs(t, inv.Err, frame.ErrInvalid)
	var fe *frame.FieldError
	require.ErrorAs(t, inv.Err, &fe)

	_, ok = AsInvalid(decodePrefix(0, 0, wire.Limits{}))
	require.False(t, ok, "a protocol error is not an invalid packet")
	_, ok = AsInvalid(errors.New("other"))
	require.False(t, ok)
	_, ok = AsInvalid(nil)
	require.False(t, ok)
}

// A startup without cancel_grace_ms decodes with the codec's default,
// which must be this package's DefaultCancelGraceMS (the host's default
// cancel grace and docs/protocol.md §3 both name it).
func TestDefaultCancelGraceAgreesWithWire(t *testing.T) {
	h := mpack.AppendMapHeader(nil, 1)
	h = mpack.AppendString(mpack.AppendString(h, "t"), "startup")
	b := binary.BigEndian.AppendUint32(nil, uint32(len(h)))
	b = binary.BigEndian.AppendUint32(b, 0)
	p, err := wire.Decode(append(b, h...), wire.Limits{})
	require.NoError(t, err)
	st, ok := p.(*wire.Startup)
	require.True(t, ok, "decoded %T", p)
	require.EqualValues(t, DefaultCancelGraceMS, st.CancelGraceMS)
}

// Every packet type wire reports invalid by name (frame above, invoke
// and end here) is one ParseType knows: the host and the child answer an
// invalid invoke or frame by comparing AsInvalid's Type.
func TestAsInvalidNamesEveryType(t *testing.T) {
	_, _, err := wire.AppendPacket(nil, &wire.Invoke{CallID: "call-9"}, wire.Limits{}) // no tool
	inv, ok := AsInvalid(err)
	require.True(t, ok, "an invoke without a tool: %v", err)
	require.Equal(t, TypeInvoke, inv.Type)
	require.Equal(t, "call-9", inv.CallID)

	_, _, err = wire.AppendPacket(nil, &wire.End{}, wire.Limits{}) // no call id
	inv, ok = AsInvalid(err)
	require.True(t, ok, "an end without a call id: %v", err)
	require.Equal(t, TypeEnd, inv.Type)
	require.Empty(t, inv.CallID)
}
