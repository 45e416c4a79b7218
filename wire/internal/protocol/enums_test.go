package protocol

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
)

// Every code parses back from its wire name; an unknown name is a field
// error matching frame.ErrInvalid.
func TestParseCode(t *testing.T) {
	codes := map[string]frame.Code{"provider_error": frame.CodeProviderError, "transport_error": frame.CodeTransportError, "unreachable": frame.CodeUnreachable, "cancelled": frame.CodeCancelled, "timeout": frame.CodeTimeout, "invalid_frame": frame.CodeInvalidFrame}
	for name, want := range codes {
		got, err := ParseCode(name)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	for _, bad := range []string{"", "oops", "Code(0)", "Code(7)"} {
		_, err := ParseCode(bad)
		require.ErrorIs(t, err, frame.ErrInvalid, bad)
		var fe *frame.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "error.code", fe.Field)
	}
}
