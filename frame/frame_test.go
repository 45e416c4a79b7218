package frame

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	okPayload = MustPayload(map[string]any{"text": "hi"})
	okInline  = &InlineMedia{Data: []byte{1, 2}, MediaType: "audio/pcm"}
	okBlob    = &BlobMedia{BlobID: "b1", SizeBytes: 10, SHA256: strings.Repeat("0123456789abcdef", 4), MediaType: "video/mp4"}
)

func fl(v float64) *float64 { return &v }

// requireFieldError asserts that err is a *FieldError naming field and that
// it matches ErrInvalid.
func requireFieldError(t *testing.T, err error, field string) {
	t.Helper()
	var fe *FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, field, fe.Field)
	require.ErrorIs(t, err, ErrInvalid)
}

// shapeOK is the lifecycle shape table of docs/protocol.md §4.1, written out
// independently of checkShape.
func shapeOK(k Kind, payload, media bool, e *Error) bool {
	switch k {
	case KindStarted:
		return !payload && !media && e == nil
	case KindChunk:
		return (payload || media) && e == nil
	case KindCompleted:
		return !media && e == nil
	case KindFailed:
		return !payload && !media && e != nil && e.Code != CodeCancelled
	case KindCancelled:
		return !payload && !media && (e == nil || e.Code == CodeCancelled)
	}
	return false
}

// TestShapeTable lists every rule of the shape table with the field named.
func TestShapeTable(t *testing.T) {
	failed := &Error{Code: CodeProviderError, Message: "x"}
	cancelled := &Error{Code: CodeCancelled}
	cases := []struct {
		name    string
		kind    Kind
		payload Payload
		media   Media
		err     *Error
		field   string // "" means valid
	}{
		{"started bare", KindStarted, nil, nil, nil, ""},
		{"started with payload", KindStarted, okPayload, nil, nil, "payload"},
		{"started with media", KindStarted, nil, okInline, nil, "media"},
		{"started with error", KindStarted, nil, nil, failed, "error"},
		{"chunk with payload", KindChunk, okPayload, nil, nil, ""},
		{"chunk with inline media", KindChunk, nil, okInline, nil, ""},
		{"chunk with blob media", KindChunk, nil, okBlob, nil, ""},
		{"chunk with both", KindChunk, okPayload, okInline, nil, ""},
		{"chunk with neither", KindChunk, nil, nil, nil, "payload"},
		{"chunk with error", KindChunk, okPayload, nil, failed, "error"},
		{"chunk with only error", KindChunk, nil, nil, failed, "payload"},
		{"completed bare", KindCompleted, nil, nil, nil, ""},
		{"completed with result", KindCompleted, okPayload, nil, nil, ""},
		{"completed with media", KindCompleted, nil, okBlob, nil, "media"},
		{"completed with error", KindCompleted, nil, nil, failed, "error"},
		{"failed with error", KindFailed, nil, nil, failed, ""},
		{"failed without error", KindFailed, nil, nil, nil, "error"},
		{"failed with cancelled code", KindFailed, nil, nil, cancelled, "error.code"},
		{"failed with payload", KindFailed, okPayload, nil, failed, "payload"},
		{"failed with media", KindFailed, nil, okInline, failed, "media"},
		{"cancelled bare", KindCancelled, nil, nil, nil, ""},
		{"cancelled with cancelled code", KindCancelled, nil, nil, cancelled, ""},
		{"cancelled with other code", KindCancelled, nil, nil, &Error{Code: CodeTimeout}, "error.code"},
		{"cancelled with payload", KindCancelled, okPayload, nil, nil, "payload"},
		{"cancelled with media", KindCancelled, nil, okInline, nil, "media"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			seq := uint64(3)
			if c.kind == KindStarted {
				seq = 0
			}
			f := Frame{CallID: "c", Direction: ProviderToCaller, Sequence: seq, Kind: c.kind, Payload: c.payload, Media: c.media, Error: c.err}
			require.Equal(t, c.field == "", shapeOK(c.kind, c.payload != nil, c.media != nil, c.err), "table and spec agree")
			err := f.Validate()
			if c.field == "" {
				require.NoError(t, err)
				return
			}
			requireFieldError(t, err, c.field)
		})
	}
}

// TestShapeExhaustive checks every combination of kind, presence of
// payload, media and error, and error code against the table.
func TestShapeExhaustive(t *testing.T) {
	errs := []*Error{nil}
	for _, c := range allCodes() {
		errs = append(errs, &Error{Code: c})
	}
	for k := KindStarted; k <= KindCancelled; k++ {
		for _, p := range []Payload{nil, okPayload} {
			for _, m := range []Media{nil, okInline, okBlob} {
				for _, e := range errs {
					seq := uint64(1)
					if k == KindStarted {
						seq = 0
					}
					f := Frame{CallID: "c", Direction: CallerToProvider, Sequence: seq, Kind: k, Payload: p, Media: m, Error: e}
					want := shapeOK(k, p != nil, m != nil, e)
					require.Equal(t, want, f.Validate() == nil, "%s payload=%v media=%v error=%v", k, p != nil, m, e)
				}
			}
		}
	}
}

// Validate checks a payload's bytes too: one that is not a map is refused.
func TestValidateChecksPayloadBytes(t *testing.T) {
	f := Frame{CallID: "c", Direction: ProviderToCaller, Sequence: 1, Kind: KindChunk, Payload: Payload{0x90}}
	requireFieldError(t, f.Validate(), "payload")
}

func TestSequenceRule(t *testing.T) {
	for k := KindStarted; k <= KindCancelled; k++ {
		for _, seq := range []uint64{0, 1, math.MaxUint64} {
			f := Frame{CallID: "c", Direction: CallerToProvider, Sequence: seq, Kind: k}
			if k == KindChunk {
				f.Payload = okPayload
			}
			if k == KindFailed {
				f.Error = &Error{Code: CodeTimeout}
			}
			err := f.Validate()
			if (seq == 0) == (k == KindStarted) {
				require.NoError(t, err, "%s at %d", k, seq)
			} else {
				var fe *FieldError
				require.ErrorAs(t, err, &fe, "%s at %d", k, seq)
				require.Equal(t, "sequence", fe.Field)
			}
		}
	}
}

// TestFieldConstraints covers every field constraint of docs/protocol.md §3 and the bounds
// just inside them.
func TestFieldConstraints(t *testing.T) {
	chunk := func(m Media) Frame {
		return Frame{CallID: "c", Direction: ProviderToCaller, Sequence: 1, Kind: KindChunk, Media: m}
	}
	failed := func(msg string) Frame {
		return Frame{CallID: "c", Direction: ProviderToCaller, Sequence: 1, Kind: KindFailed, Error: &Error{Code: CodeProviderError, Message: msg}}
	}
	withID := func(id string) Frame {
		return Frame{CallID: id, Direction: ProviderToCaller, Sequence: 1, Kind: KindCompleted}
	}
	inline := func(mod func(*InlineMedia)) Frame {
		m := *okInline
		mod(&m)
		return chunk(&m)
	}
	blob := func(mod func(*BlobMedia)) Frame {
		m := *okBlob
		mod(&m)
		return chunk(&m)
	}
	cases := []struct {
		name  string
		f     Frame
		field string
	}{
		{"call_id empty", withID(""), "call_id"},
		{"call_id 128 chars", withID(strings.Repeat("é", 128)), ""},
		{"call_id 129 chars", withID(strings.Repeat("é", 129)), "call_id"},
		{"call_id 129 bytes of 1 char", withID(strings.Repeat("a", 129)), "call_id"},
		{"call_id invalid UTF-8", withID("a\xffb"), "call_id"},
		{"direction zero", Frame{CallID: "c", Sequence: 1, Kind: KindCompleted}, "direction"},
		{"direction unknown", Frame{CallID: "c", Direction: 3, Sequence: 1, Kind: KindCompleted}, "direction"},
		{"kind zero", Frame{CallID: "c", Direction: CallerToProvider, Sequence: 1}, "kind"},
		{"kind unknown", Frame{CallID: "c", Direction: CallerToProvider, Sequence: 1, Kind: 6}, "kind"},
		{"message 2048 chars", failed(strings.Repeat("€", maxMessageChars)), ""},
		{"message 2049 chars", failed(strings.Repeat("€", maxMessageChars+1)), "error.message"},
		{"message invalid UTF-8", failed("\xc3"), "error.message"},
		{"error code zero", Frame{CallID: "c", Direction: ProviderToCaller, Sequence: 1, Kind: KindFailed, Error: &Error{}}, "error.code"},
		{"error code unknown", Frame{CallID: "c", Direction: ProviderToCaller, Sequence: 1, Kind: KindFailed, Error: &Error{Code: 7}}, "error.code"},
		{"media_type missing", inline(func(m *InlineMedia) { m.MediaType = "" }), "media.media_type"},
		{"media_type 256 chars", inline(func(m *InlineMedia) { m.MediaType = strings.Repeat("ü", 256) }), ""},
		{"media_type 257 chars", inline(func(m *InlineMedia) { m.MediaType = strings.Repeat("ü", 257) }), "media.media_type"},
		{"media_type invalid UTF-8", inline(func(m *InlineMedia) { m.MediaType = "a/\xff" }), "media.media_type"},
		{"codec invalid UTF-8", inline(func(m *InlineMedia) { m.Codec = "\xff" }), "media.codec"},
		{"sample_rate negative", inline(func(m *InlineMedia) { m.SampleRate = -1 }), "media.sample_rate"},
		{"sample_rate positive", inline(func(m *InlineMedia) { m.SampleRate = 48000 }), ""},
		{"channels negative", inline(func(m *InlineMedia) { m.Channels = -2 }), "media.channels"},
		{"channels positive", inline(func(m *InlineMedia) { m.Channels = 2 }), ""},
		{"timestamp negative", inline(func(m *InlineMedia) { m.TimestampSeconds = fl(-0.001) }), "media.timestamp_seconds"},
		{"timestamp zero", inline(func(m *InlineMedia) { m.TimestampSeconds = fl(0) }), ""},
		{"timestamp NaN", inline(func(m *InlineMedia) { m.TimestampSeconds = fl(math.NaN()) }), "media.timestamp_seconds"},
		{"timestamp +Inf", inline(func(m *InlineMedia) { m.TimestampSeconds = fl(math.Inf(1)) }), "media.timestamp_seconds"},
		{"duration negative", inline(func(m *InlineMedia) { m.DurationSeconds = fl(-1) }), "media.duration_seconds"},
		{"duration -Inf", inline(func(m *InlineMedia) { m.DurationSeconds = fl(math.Inf(-1)) }), "media.duration_seconds"},
		{"duration zero", inline(func(m *InlineMedia) { m.DurationSeconds = fl(0) }), ""},
		{"empty inline data", inline(func(m *InlineMedia) { m.Data = nil }), ""},
		{"nil inline media", chunk((*InlineMedia)(nil)), "media"},
		{"nil blob media", chunk((*BlobMedia)(nil)), "media"},
		{"blob_id empty", blob(func(m *BlobMedia) { m.BlobID = "" }), "media.blob_id"},
		{"blob size negative", blob(func(m *BlobMedia) { m.SizeBytes = -1 }), "media.size_bytes"},
		{"blob size zero", blob(func(m *BlobMedia) { m.SizeBytes = 0 }), ""},
		{"sha256 upper case", blob(func(m *BlobMedia) { m.SHA256 = strings.Repeat("AB", 32) }), "media.sha256"},
		{"sha256 63 digits", blob(func(m *BlobMedia) { m.SHA256 = strings.Repeat("a", 63) }), "media.sha256"},
		{"sha256 65 digits", blob(func(m *BlobMedia) { m.SHA256 = strings.Repeat("a", 65) }), "media.sha256"},
		{"sha256 not hex", blob(func(m *BlobMedia) { m.SHA256 = strings.Repeat("g", 64) }), "media.sha256"},
		{"sha256 with newline", blob(func(m *BlobMedia) { m.SHA256 = strings.Repeat("a", 64) + "\n" }), "media.sha256"},
		{"sha256 with a byte next to a digit range", blob(func(m *BlobMedia) { m.SHA256 = strings.Repeat("a", 63) + "`" }), "media.sha256"},
		{"sha256 with a byte below the digits", blob(func(m *BlobMedia) { m.SHA256 = "/" + strings.Repeat("0", 63) }), "media.sha256"},
		{"sha256 with a byte above the digits", blob(func(m *BlobMedia) { m.SHA256 = strings.Repeat("9", 32) + ":" + strings.Repeat("f", 31) }), "media.sha256"},
		{"blob media_type empty", blob(func(m *BlobMedia) { m.MediaType = "" }), "media.media_type"},
		{"payload not a map", Frame{CallID: "c", Direction: ProviderToCaller, Sequence: 1, Kind: KindChunk, Payload: Payload{0x90}}, "payload"},
		{"payload truncated", Frame{CallID: "c", Direction: ProviderToCaller, Sequence: 1, Kind: KindChunk, Payload: Payload{0x81}}, "payload"},
		{"payload trailing", Frame{CallID: "c", Direction: ProviderToCaller, Sequence: 1, Kind: KindChunk, Payload: Payload{0x80, 0x80}}, "payload"},
		{"payload empty bytes", Frame{CallID: "c", Direction: ProviderToCaller, Sequence: 1, Kind: KindChunk, Payload: Payload{}}, "payload"},
		{"payload with binary", Frame{CallID: "c", Direction: ProviderToCaller, Sequence: 1, Kind: KindChunk, Payload: Payload{0x81, 0xa1, 'b', 0xc4, 0x00}}, "payload"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.f.Validate()
			if c.field == "" {
				require.NoError(t, err)
				return
			}
			requireFieldError(t, err, c.field)
			require.NotContains(t, err.Error(), "ü")
			require.NotContains(t, err.Error(), "€")
		})
	}
}

// allCodes lists every defined code in order.
func allCodes() []Code {
	return []Code{CodeProviderError, CodeTransportError, CodeUnreachable, CodeCancelled, CodeTimeout, CodeInvalidFrame}
}

// The wire names of the enums; reading them back is wire's (its decoder,
// wire/internal/protocol's ParseKind and ParseCode) and the call log's.
func TestEnums(t *testing.T) {
	require.Equal(t, "caller_to_provider", CallerToProvider.String())
	require.Equal(t, "provider_to_caller", ProviderToCaller.String())
	require.Equal(t, "Direction(0)", Direction(0).String())
	require.Equal(t, "Direction(9)", Direction(9).String())

	names := []string{"started", "chunk", "completed", "failed", "cancelled"}
	for i, name := range names {
		k := Kind(i + 1)
		require.Equal(t, name, k.String())
		require.Equal(t, i >= 2, k.IsTerminal())
		f := Frame{Kind: k}
		require.Equal(t, i >= 2, f.Kind.IsTerminal())
	}
	require.False(t, Kind(0).IsTerminal())
	require.False(t, Kind(6).IsTerminal())
	require.Equal(t, "Kind(6)", Kind(6).String())

	codes := []string{"provider_error", "transport_error", "unreachable", "cancelled", "timeout", "invalid_frame"}
	require.Len(t, allCodes(), len(codes))
	for i, c := range allCodes() {
		require.Equal(t, codes[i], c.String())
	}
	require.Equal(t, "Code(0)", Code(0).String())
}

func TestConstructors(t *testing.T) {
	f, err := NewStarted("c", CallerToProvider)
	require.NoError(t, err)
	require.Equal(t, Frame{CallID: "c", Direction: CallerToProvider, Kind: KindStarted}, f)

	f, err = NewChunk("c", ProviderToCaller, 1, okPayload, nil)
	require.NoError(t, err)
	require.Equal(t, KindChunk, f.Kind)
	f, err = NewChunk("c", ProviderToCaller, 2, nil, okInline)
	require.NoError(t, err)
	require.Equal(t, okInline, f.Media)
	_, err = NewChunk("c", ProviderToCaller, 2, nil, nil)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = NewChunk("c", ProviderToCaller, 0, okPayload, nil)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = NewChunk("", ProviderToCaller, 1, okPayload, nil)
	require.ErrorIs(t, err, ErrInvalid)

	f, err = NewCompleted("c", ProviderToCaller, 3, nil)
	require.NoError(t, err)
	require.True(t, f.Kind.IsTerminal())
	f, err = NewCompleted("c", ProviderToCaller, 3, okPayload)
	require.NoError(t, err)
	require.Equal(t, okPayload, f.Payload)

	f, err = NewFailed("c", ProviderToCaller, 4, CodeTimeout, "late")
	require.NoError(t, err)
	require.Equal(t, &Error{Code: CodeTimeout, Message: "late"}, f.Error)
	f, err = NewFailed("c", ProviderToCaller, 4, CodeProviderError, strings.Repeat("x", 5000)+"\xff")
	require.NoError(t, err, "the message is sanitized")
	require.Len(t, f.Error.Message, maxMessageChars)
	_, err = NewFailed("c", ProviderToCaller, 4, CodeCancelled, "")
	require.ErrorIs(t, err, ErrInvalid)
	_, err = NewFailed("c", ProviderToCaller, 4, 0, "")
	require.ErrorIs(t, err, ErrInvalid)

	f, err = NewCancelled("c", CallerToProvider, 2, "")
	require.NoError(t, err)
	require.Nil(t, f.Error)
	f, err = NewCancelled("c", CallerToProvider, 2, "bye")
	require.NoError(t, err)
	require.Equal(t, &Error{Code: CodeCancelled, Message: "bye"}, f.Error)
	_, err = NewCancelled("c", CallerToProvider, 0, "")
	require.ErrorIs(t, err, ErrInvalid)
}

func TestSanitizeMessage(t *testing.T) {
	cases := []struct {
		in, want string
	}{
		{"", ""},
		{"plain", "plain"},
		{"bad \xff byte", "bad \uFFFD byte"},
		{strings.Repeat("a", maxMessageChars), strings.Repeat("a", maxMessageChars)},
		{strings.Repeat("a", maxMessageChars+1), strings.Repeat("a", maxMessageChars)},
		{strings.Repeat("日", maxMessageChars+7), strings.Repeat("日", maxMessageChars)},
		{strings.Repeat("a", maxMessageChars-1) + "日本", strings.Repeat("a", maxMessageChars-1) + "日"},
		{strings.Repeat("\xff", maxMessageChars+3), "\uFFFD"}, // a run of invalid bytes becomes one U+FFFD
		{strings.Repeat("a\xff", maxMessageChars), strings.Repeat("a\uFFFD", maxMessageChars/2)},
	}
	for _, c := range cases {
		got := sanitizeMessage(c.in)
		require.Equal(t, c.want, got)
		require.True(t, utf8.ValidString(got))
		require.LessOrEqual(t, utf8.RuneCountInString(got), maxMessageChars)
	}
}

func TestErrorAndFieldError(t *testing.T) {
	e := &Error{Code: CodeTimeout, Message: "deadline"}
	require.Equal(t, "timeout: deadline", e.Error())
	require.Equal(t, "cancelled", (&Error{Code: CodeCancelled}).Error())
	var target *Error
	require.ErrorAs(t, error(e), &target)

	fe := &FieldError{Field: "media.channels", Reason: "must be > 0"}
	require.Equal(t, "frame: media.channels: must be > 0", fe.Error())
	require.True(t, errors.Is(fe, ErrInvalid))
	require.False(t, errors.Is(fe, errors.New("frame: invalid")))
}

func TestCheckCallID(t *testing.T) {
	require.NoError(t, checkCallID("c"))
	require.ErrorIs(t, checkCallID(""), ErrInvalid)
	require.ErrorIs(t, checkCallID(strings.Repeat("x", 129)), ErrInvalid)
	require.NoError(t, checkCallID(strings.Repeat("x", 128)))
}

func TestPayload(t *testing.T) {
	p, err := PayloadOf(map[string]any{"b": 2, "a": []any{1, "x", nil, true, 1.5}})
	require.NoError(t, err)
	q, err := PayloadOf(map[string]any{"a": []any{1, "x", nil, true, 1.5}, "b": 2})
	require.NoError(t, err)
	require.Equal(t, p, q, "keys are sorted: equal values give equal bytes")

	type item struct {
		Text  string `json:"text"`
		Count int    `json:"count,omitempty"`
	}
	p, err = PayloadOf(item{Text: "hi"})
	require.NoError(t, err)
	txt, ok := p.Text()
	require.True(t, ok)
	require.Equal(t, "hi", txt)
	var back item
	require.NoError(t, p.Decode(&back))
	require.Equal(t, item{Text: "hi"}, back)

	_, err = PayloadOf([]int{1})
	require.ErrorIs(t, err, ErrInvalid)
	_, err = PayloadOf(42)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = PayloadOf(map[string]any{"f": math.NaN()})
	require.ErrorIs(t, err, ErrInvalid)
	_, err = PayloadOf(map[string]any{"b": []byte{1}})
	require.ErrorIs(t, err, ErrInvalid)
	_, err = PayloadOf(make(chan int))
	require.Error(t, err)
	require.Panics(t, func() { MustPayload(1) })

	p, err = PayloadOf(json.RawMessage([]byte(`{"n": 3, "f": 2.5, "big": 12345678901234, "s": "x", "o": {"l": [1, {"z": null}]}}`)))
	require.NoError(t, err)
	m, err := p.Map()
	require.NoError(t, err)
	require.EqualValues(t, 3, m["n"])
	require.EqualValues(t, 2.5, m["f"])
	require.EqualValues(t, int64(12345678901234), m["big"])
	js, err := json.Marshal(p)
	require.NoError(t, err)
	require.JSONEq(t, `{"n": 3, "f": 2.5, "big": 12345678901234, "s": "x", "o": {"l": [1, {"z": null}]}}`, string(js))

	for _, bad := range []string{`[1]`, `3`, `null`, `{"a":1} {}`, `{`, ``} {
		_, err := PayloadOf(json.RawMessage([]byte(bad)))
		require.ErrorIs(t, err, ErrInvalid, bad)
	}

	var u struct{ P Payload }
	require.NoError(t, json.Unmarshal([]byte(`{"P": {"text": "yo"}}`), &u))
	txt, ok = u.P.Text()
	require.True(t, ok)
	require.Equal(t, "yo", txt)
	require.NoError(t, json.Unmarshal([]byte(`{"P": null}`), &u))
	require.Nil(t, u.P)
	require.Error(t, json.Unmarshal([]byte(`{"P": [1]}`), &u))

	var nilP Payload
	js, err = json.Marshal(nilP)
	require.NoError(t, err)
	require.Equal(t, "null", string(js))
	m, err = nilP.Map()
	require.NoError(t, err)
	require.Nil(t, m)
	_, ok = nilP.Text()
	require.False(t, ok)
	_, ok = MustPayload(map[string]any{"text": 1}).Text()
	require.False(t, ok)
	require.Error(t, Payload{0x90}.Decode(&m))
}

// TestPayloadMapNumberTypes: Map gives every integer as int64 (uint64 only
// above math.MaxInt64) and every float as float64, whatever width the
// encoding used, nested values too.
func TestPayloadMapNumberTypes(t *testing.T) {
	p := MustPayload(map[string]any{
		"i8": int8(-3), "u16": uint16(60000), "u8": uint8(200), "big": uint64(math.MaxUint64),
		"f32": float32(1.5), "nested": map[string]any{"x": uint32(7)}, "list": []any{uint8(1), int16(-2)},
	})
	m, err := p.Map()
	require.NoError(t, err)
	require.Equal(t, map[string]any{
		"i8": int64(-3), "u16": int64(60000), "u8": int64(200), "big": uint64(math.MaxUint64),
		"f32": float64(1.5), "nested": map[string]any{"x": int64(7)}, "list": []any{int64(1), int64(-2)},
	}, m)
}

// TestPayloadDecodeAsJSON: Decode follows encoding/json's rules, so a
// struct without tags matches keys case-insensitively, and a nil payload
// leaves v as it was.
func TestPayloadDecodeAsJSON(t *testing.T) {
	var v struct {
		Name  string
		Count int
		Ratio float64 `json:"r"`
	}
	require.NoError(t, MustPayload(map[string]any{"name": "x", "COUNT": 3, "r": 2, "other": true}).Decode(&v))
	require.Equal(t, "x", v.Name)
	require.Equal(t, 3, v.Count)
	require.Equal(t, 2.0, v.Ratio)
	require.NoError(t, Payload(nil).Decode(&v))
	require.Equal(t, "x", v.Name)
	var wrong struct{ Count string }
	err := MustPayload(map[string]any{"count": 3}).Decode(&wrong)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "3", "the error names the field, not the value")
}

// TestPayloadString: a Payload prints as JSON.
func TestPayloadString(t *testing.T) {
	require.Equal(t, `{"a":1,"b":"x"}`, MustPayload(map[string]any{"b": "x", "a": 1}).String())
	require.Equal(t, "null", Payload(nil).String())
	require.Equal(t, `{"a":1}`, fmt.Sprintf("%v", MustPayload(map[string]any{"a": 1})))
	require.Contains(t, Payload{0xc1}.String(), "invalid payload")
}

// TestPayloadText: Text finds "text" among other keys, and refuses a
// non-string value or a payload that is not a map.
func TestPayloadText(t *testing.T) {
	s, ok := MustPayload(map[string]any{"a": []any{1, 2}, "text": "hi", "z": 1}).Text()
	require.True(t, ok)
	require.Equal(t, "hi", s)
	_, ok = MustPayload(map[string]any{"text": 5}).Text()
	require.False(t, ok)
	_, ok = MustPayload(map[string]any{"other": "x"}).Text()
	require.False(t, ok)
	_, ok = Payload(nil).Text()
	require.False(t, ok)
}
