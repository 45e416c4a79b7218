package frame

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"

	"github.com/skulkrt/skulk/frame/mpack"
	"github.com/vmihailenco/msgpack/v5"
)

// Payload is a JSON object carried as its MessagePack encoding: exactly one
// map with string keys whose values all have a JSON form. A nil Payload
// means "no payload".
//
// Payloads are immutable by convention: nothing in Skulk modifies one after
// it was built, so one may be shared between frames and goroutines.
type Payload []byte

// PayloadOf encodes v, which must encode as a map: a map with string keys, or
// a struct (its `json` tags name the fields). Map keys are sorted, so equal
// values give equal bytes. A json.RawMessage is read as the text of a JSON
// object (numbers keep their integer form when they have one); anything else
// in it, trailing data included, is refused with a *FieldError.
func PayloadOf(v any) (Payload, error) {
	if raw, ok := v.(json.RawMessage); ok {
		return payloadFromJSON(raw)
	}
	if m, ok := v.(map[string]any); ok && m != nil {
		// The common case, a map of decoded JSON's shapes, without the
		// library's reflection; the same bytes.
		if b, ok := mpack.AppendValue(make([]byte, 0, 64), m); ok {
			p := Payload(b)
			if err := checkPayload(p); err != nil {
				return nil, err
			}
			return p, nil
		}
	}
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	enc.SetCustomStructTag("json")
	enc.UseCompactInts(true)
	enc.UseCompactFloats(true)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("frame: payload: cannot encode a %T", v)
	}
	p := Payload(buf.Bytes())
	if err := checkPayload(p); err != nil {
		return nil, err
	}
	return p, nil
}

// MustPayload is PayloadOf for values known to be valid, such as literals in
// tests and examples. It panics on error.
func MustPayload(v any) Payload {
	p, err := PayloadOf(v)
	if err != nil {
		panic(err)
	}
	return p
}

// payloadFromJSON converts a JSON object to a Payload. Numbers keep their
// integer form when they have one.
func payloadFromJSON(data []byte) (Payload, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil {
		return nil, fieldErr("payload", "not a JSON object")
	}
	if dec.More() {
		return nil, fieldErr("payload", "trailing data after the JSON object")
	}
	return PayloadOf(normalizeNumbers(m))
}

// normalizeNumbers replaces json.Number with int64 or float64.
func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = normalizeNumbers(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = normalizeNumbers(e)
		}
		return x
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v
}

// Decode decodes p into v as encoding/json decodes the payload's JSON form
// (see String): struct fields match keys by their `json` tags or, without
// one, by name with case folded; unknown keys are ignored; numbers decode
// into any numeric field that holds them. A nil Payload decodes as {}.
func (p Payload) Decode(v any) error {
	j, err := p.jsonBytes()
	if err != nil {
		return err
	}
	if err := json.Unmarshal(j, v); err != nil {
		return fmt.Errorf("frame: payload: cannot decode into %T: %w", v, err)
	}
	return nil
}

// Map decodes p into a map. A nil Payload gives a nil map. Every number is
// an int64, a uint64 for an integer above math.MaxInt64, or a float64
// (a float without a fractional part stays a float64), whatever width
// MessagePack encoded it with; strings, bools, nil, []any and
// map[string]any are as encoding/json gives them.
func (p Payload) Map() (map[string]any, error) {
	if p == nil {
		return nil, nil
	}
	dec := msgpack.NewDecoder(bytes.NewReader(p))
	dec.UseLooseInterfaceDecoding(true) // every int as int64 or uint64, every float as float64
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("frame: payload: cannot decode into a map: %w", err)
	}
	for k, v := range m {
		m[k] = oneIntType(v)
	}
	return m, nil
}

// oneIntType makes every uint64 that fits an int64 one, in v and in what
// it holds: loose decoding gives uint64 for an integer MessagePack encoded
// as unsigned, whatever its value.
func oneIntType(v any) any {
	switch x := v.(type) {
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x)
		}
	case map[string]any:
		for k, e := range x {
			x[k] = oneIntType(e)
		}
	case []any:
		for i, e := range x {
			x[i] = oneIntType(e)
		}
	}
	return v
}

// String returns the payload's JSON form, "null" for a nil Payload, so
// that a Payload prints readably with %s and %v. An invalid payload gives
// a description of the fault, never its bytes.
func (p Payload) String() string {
	j, err := p.MarshalJSON()
	if err != nil {
		return "<invalid payload: " + err.Error() + ">"
	}
	return string(j)
}

// jsonBytes is p's JSON form, {} for a nil Payload.
func (p Payload) jsonBytes() ([]byte, error) {
	if p == nil {
		return []byte("{}"), nil
	}
	return p.MarshalJSON()
}

// MarshalJSON returns the payload as a JSON object, or null when nil.
func (p Payload) MarshalJSON() ([]byte, error) {
	if p == nil {
		return []byte("null"), nil
	}
	m, err := p.Map()
	if err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// UnmarshalJSON sets p from a JSON object (null gives nil).
func (p *Payload) UnmarshalJSON(data []byte) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		*p = nil
		return nil
	}
	q, err := payloadFromJSON(data)
	if err != nil {
		return err
	}
	*p = q
	return nil
}

// Text returns the string at key "text" when p is an object that has one,
// which is how Skulk's tools stream text.
func (p Payload) Text() (string, bool) {
	r := mpack.NewReader(p)
	n, err := r.ReadMapLen()
	if err != nil {
		return "", false
	}
	for range n {
		k, err := r.ReadStr()
		if err != nil {
			return "", false
		}
		if string(k) != "text" {
			if _, err := r.Skip(); err != nil {
				return "", false
			}
			continue
		}
		v, err := r.ReadStr()
		if err != nil {
			return "", false
		}
		return string(v), true
	}
	return "", false
}
