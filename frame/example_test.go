package frame_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/skulkrt/skulk/frame"
)

func ExampleNewChunk() {
	f, err := frame.NewChunk("call-1", frame.ProviderToCaller, 1, frame.MustPayload(map[string]any{"text": "hello"}), nil)
	if err != nil {
		panic(err)
	}
	text, _ := f.Payload.Text()
	fmt.Println(f.Kind, f.Direction, f.Sequence, text, f.Kind.IsTerminal())
	// Output: chunk provider_to_caller 1 hello false
}

func ExampleNewChunk_inlineMedia() {
	f, err := frame.NewChunk("call-1", frame.ProviderToCaller, 2, nil,
		&frame.InlineMedia{Data: []byte{0, 1, 0, 1}, MediaType: "audio/pcm", SampleRate: 16000, Channels: 1})
	if err != nil {
		panic(err)
	}
	m := f.Media.(*frame.InlineMedia)
	fmt.Println(m.MediaType, len(m.Data))
	// Output: audio/pcm 4
}

func ExampleFrame_Validate() {
	f := frame.Frame{CallID: "call-1", Direction: frame.CallerToProvider, Sequence: 3, Kind: frame.KindFailed}
	err := f.Validate()
	var fe *frame.FieldError
	if errors.As(err, &fe) {
		fmt.Println(fe.Field, "-", fe.Reason)
	}
	fmt.Println(errors.Is(err, frame.ErrInvalid))
	// Output:
	// error - required on failed
	// true
}

func ExampleNewFailed() {
	f, err := frame.NewFailed("call-1", frame.ProviderToCaller, 7, frame.CodeTimeout, "took too long")
	if err != nil {
		panic(err)
	}
	fmt.Println(f.Kind, f.Error, f.Kind.IsTerminal())
	// Output: failed timeout: took too long true
}

// A failed frame's message is made fit for the wire: invalid UTF-8 becomes
// U+FFFD and the text is cut to 2,048 characters.
func ExampleNewFailed_longMessage() {
	f, err := frame.NewFailed("call-1", frame.ProviderToCaller, 1, frame.CodeProviderError, "bad byte \xff "+strings.Repeat("é", 3000))
	if err != nil {
		panic(err)
	}
	msg := f.Error.Message
	fmt.Println(len([]rune(msg)), strings.HasPrefix(msg, "bad byte \uFFFD"))
	// Output: 2048 true
}

func ExamplePayloadOf_json() {
	p, err := frame.PayloadOf(json.RawMessage([]byte(`{"text": "hi", "n": 3}`)))
	if err != nil {
		panic(err)
	}
	js, _ := p.MarshalJSON()
	fmt.Println(string(js))
	// Output: {"n":3,"text":"hi"}
}
