package wire_test

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame/mpack"
	"github.com/skulkrt/skulk/wire"
)

// The exported limits are those Limits.Check and Limits.Effective apply.
func TestLimitsNumbers(t *testing.T) {
	for _, c := range []struct {
		name        string
		l           wire.Limits
		header, att uint32 // the largest lengths l takes
	}{
		{"defaults", wire.Limits{}, wire.DefaultMaxHeader, wire.DefaultMaxAttachment},
		{"hard ceilings", wire.Limits{MaxHeader: 1 << 31, MaxAttachment: 1 << 31}, wire.HardMaxHeader, wire.HardMaxAttachment},
		{"configured", wire.Limits{MaxHeader: 100, MaxAttachment: 200}, 100, 200},
	} {
		require.NoError(t, c.l.Check(c.header, c.att), c.name)
		require.ErrorIs(t, c.l.Check(c.header+1, 0), wire.ErrTooLarge, c.name)
		require.ErrorIs(t, c.l.Check(1, c.att+1), wire.ErrTooLarge, c.name)
		require.Equal(t, c.header, c.l.Effective().MaxHeader, c.name)
		require.Equal(t, c.att, c.l.Effective().MaxAttachment, c.name)
	}
	err := wire.Limits{}.Check(0, 0)
	require.ErrorIs(t, err, wire.ErrProtocol, "a header length of 0")
	require.NotErrorIs(t, err, wire.ErrTooLarge, "a header length of 0")
}

// PrefixLen is the length of the prefix AppendPacket writes.
func TestPrefixLen(t *testing.T) {
	hdr, att, err := wire.AppendPacket(nil, &wire.Ping{Nonce: 7}, wire.Limits{})
	require.NoError(t, err)
	require.Empty(t, att)
	require.Greater(t, len(hdr), wire.PrefixLen)
	require.Equal(t, uint32(len(hdr)-wire.PrefixLen), binary.BigEndian.Uint32(hdr), "header length")
	require.Zero(t, binary.BigEndian.Uint32(hdr[4:wire.PrefixLen]), "attachment length")
}

// A startup without cancel_grace_ms decodes with DefaultCancelGraceMS
// (the host's default cancel grace and docs/protocol.md §3 both name it).
func TestDefaultCancelGrace(t *testing.T) {
	h := mpack.AppendMapHeader(nil, 1)
	h = mpack.AppendString(mpack.AppendString(h, "t"), "startup")
	b := binary.BigEndian.AppendUint32(nil, uint32(len(h)))
	b = binary.BigEndian.AppendUint32(b, 0)
	p, err := wire.Decode(append(b, h...), wire.Limits{})
	require.NoError(t, err)
	st, ok := p.(*wire.Startup)
	require.True(t, ok, "decoded %T", p)
	require.EqualValues(t, wire.DefaultCancelGraceMS, st.CancelGraceMS)
}
