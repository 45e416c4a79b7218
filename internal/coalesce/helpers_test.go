package coalesce

import (
	"errors"
	"io"
	"testing"

	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/wire"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// readAll reads packets from r up to a clean EOF.
func readAll(t *testing.T, r *packetio.Reader) []wire.Packet {
	t.Helper()
	var ps []wire.Packet
	for {
		p, err := r.ReadPacket()
		if errors.Is(err, io.EOF) {
			return ps
		}
		require.NoError(t, err)
		ps = append(ps, p)
	}
}
