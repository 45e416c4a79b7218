package protocol

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/wire"
)

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

	_, ok = AsInvalid(wire.Limits{}.Check(0, 0))
	require.False(t, ok, "a protocol error is not an invalid packet")
	_, ok = AsInvalid(errors.New("other"))
	require.False(t, ok)
	_, ok = AsInvalid(nil)
	require.False(t, ok)
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
