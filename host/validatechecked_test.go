package host

import (
	"testing"

	"github.com/skulkrt/skulk/frame"
	"github.com/stretchr/testify/require"
)

// validateChecked, Send's check of a chunk whose payload's bytes it
// checked already, refuses what frame.Validate refuses but the payload's
// bytes, and leaves the frame as it was.
func TestValidateCheckedRefusesWhatValidateRefuses(t *testing.T) {
	chunk := func(p frame.Payload, m frame.Media) frame.Frame {
		return frame.Frame{CallID: "c", Direction: frame.CallerToProvider, Sequence: 1, Kind: frame.KindChunk, Payload: p, Media: m}
	}
	ok := frame.MustPayload(map[string]any{"text": "x"})
	notMap := frame.Payload{0x90} // an empty array: Send checked the bytes before
	for name, c := range map[string]struct {
		f     frame.Frame
		field string
	}{
		"payload":             {chunk(ok, nil), ""},
		"payload bytes":       {chunk(notMap, nil), ""},
		"inline media":        {chunk(nil, &frame.InlineMedia{Data: []byte{1}, MediaType: "audio/pcm"}), ""},
		"no payload or media": {chunk(nil, nil), "payload"},
		"media type":          {chunk(ok, &frame.InlineMedia{Data: []byte{1}}), "media.media_type"},
		"media channels":      {chunk(nil, &frame.InlineMedia{MediaType: "audio/pcm", Channels: -1}), "media.channels"},
		"call id":             {frame.Frame{Direction: frame.CallerToProvider, Sequence: 1, Kind: frame.KindChunk, Payload: ok}, "call_id"},
		"sequence":            {frame.Frame{CallID: "c", Direction: frame.CallerToProvider, Kind: frame.KindChunk, Payload: notMap}, "sequence"},
	} {
		t.Run(name, func(t *testing.T) {
			f := c.f
			err := validateChecked(&f)
			require.Equal(t, c.f, f, "the frame is left as it was")
			if c.field == "" {
				require.NoError(t, err)
				return
			}
			var fe *frame.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, c.field, fe.Field)
		})
	}
}
