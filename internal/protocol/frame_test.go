package protocol

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/frame/mpack"
)

// TestKnownCodeAgreesWithFrame: KnownCode accepts exactly the codes a
// failed or cancelled frame may carry by frame.Frame.Validate (cancelled
// is the one code of a cancelled frame, and a failed frame's other five).
func TestKnownCodeAgreesWithFrame(t *testing.T) {
	known := 0
	for i := range 256 {
		c := frame.Code(i)
		failed := frame.Frame{CallID: "c", Direction: frame.ProviderToCaller, Sequence: 1, Kind: frame.KindFailed,
			Error: &frame.Error{Code: c}}
		cancelled := failed
		cancelled.Kind = frame.KindCancelled
		require.Equal(t, failed.Validate() == nil || cancelled.Validate() == nil, KnownCode(c), "code %d", i)
		if KnownCode(c) {
			known++
		}
	}
	require.Equal(t, 6, known)
}

// TestSanitizeMessageAgreesWithFrame: SanitizeMessage gives the message
// frame.NewFailed puts in its frame, and a valid one, for each input.
func TestSanitizeMessageAgreesWithFrame(t *testing.T) {
	for _, in := range []string{
		"", "plain", "bad \xff byte",
		strings.Repeat("a", MaxMessageChars), strings.Repeat("a", MaxMessageChars+1),
		strings.Repeat("日", MaxMessageChars+7), strings.Repeat("a", MaxMessageChars-1) + "日本",
		strings.Repeat("\xff", MaxMessageChars+3), strings.Repeat("a\xff", MaxMessageChars),
	} {
		f, err := frame.NewFailed("c", frame.ProviderToCaller, 1, frame.CodeProviderError, in)
		require.NoError(t, err)
		got := SanitizeMessage(in)
		require.Equal(t, f.Error.Message, got)
		require.True(t, utf8.ValidString(got))
		require.LessOrEqual(t, utf8.RuneCountInString(got), MaxMessageChars)
	}
	require.Equal(t, strings.Repeat("日", MaxMessageChars), SanitizeMessage(strings.Repeat("日", MaxMessageChars+7)))
}

// TestCheckCallIDAgreesWithFrame: CheckCallID refuses exactly the call
// ids frame.Frame.Validate refuses, with the same error.
func TestCheckCallIDAgreesWithFrame(t *testing.T) {
	for _, id := range []string{
		"c", "", "bad \xff", strings.Repeat("x", 128), strings.Repeat("x", 129),
		strings.Repeat("日", 128), strings.Repeat("日", 129), "日本",
	} {
		f := frame.Frame{CallID: id, Direction: frame.CallerToProvider, Kind: frame.KindStarted}
		require.Equal(t, f.Validate(), CheckCallID(id), "id %q", id)
	}
	require.ErrorIs(t, CheckCallID(""), frame.ErrInvalid)
}

// TestCheckPayloadAgreesWithFrame: CheckPayload refuses exactly the
// payloads frame.Frame.Validate refuses, with the same error.
func TestCheckPayloadAgreesWithFrame(t *testing.T) {
	deep := []byte{0x81, 0xa1, 'k'}
	for range mpack.MaxDepth + 1 {
		deep = append(deep, 0x91)
	}
	deep = append(deep, 0xc0)
	for name, p := range map[string][]byte{
		"object":       frame.MustPayload(map[string]any{"text": "hi"}),
		"empty object": {0x80},
		"array":        {0x90},
		"string":       {0xa1, 'x'},
		"binary value": {0x81, 0xa1, 'k', 0xc4, 0x01, 0x00},
		"deep":         deep,
		"truncated":    {0x81, 0xa1},
		"trailing":     {0x80, 0x80},
	} {
		f := frame.Frame{CallID: "c", Direction: frame.CallerToProvider, Sequence: 1, Kind: frame.KindChunk, Payload: p}
		require.Equal(t, f.Validate(), CheckPayload(p), name)
	}
	require.Error(t, CheckPayload(frame.Payload{0x90}))
}
