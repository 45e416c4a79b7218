package protocol

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
)

// Every kind and code parses back from its wire name; an unknown name is a
// field error matching frame.ErrInvalid.
func TestParseKindAndCode(t *testing.T) {
	kinds := map[string]frame.Kind{"started": frame.KindStarted, "chunk": frame.KindChunk, "completed": frame.KindCompleted, "failed": frame.KindFailed, "cancelled": frame.KindCancelled}
	for name, want := range kinds {
		got, err := ParseKind(name)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	codes := map[string]frame.Code{"provider_error": frame.CodeProviderError, "transport_error": frame.CodeTransportError, "unreachable": frame.CodeUnreachable, "cancelled": frame.CodeCancelled, "timeout": frame.CodeTimeout, "invalid_frame": frame.CodeInvalidFrame}
	for name, want := range codes {
		got, err := ParseCode(name)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	for _, bad := range []string{"", "Started", "Kind(1)", "Kind(0)"} {
		_, err := ParseKind(bad)
		require.ErrorIs(t, err, frame.ErrInvalid, bad)
		var fe *frame.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "kind", fe.Field)
	}
	for _, bad := range []string{"", "oops", "Code(0)", "Code(7)"} {
		_, err := ParseCode(bad)
		require.ErrorIs(t, err, frame.ErrInvalid, bad)
		var fe *frame.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "error.code", fe.Field)
	}
}
