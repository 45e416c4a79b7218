package cli

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"

	"github.com/skulkrt/skulk/frame"
)

// jsonFrame is one line of `call --json`: a provider frame with its fields
// named as in docs/protocol.md §3. Every key is always present (null when the frame
// has no such field), so scripts can index without checking.
type jsonFrame struct {
	CallID    string     `json:"call_id"`
	Direction string     `json:"direction"`
	Sequence  uint64     `json:"sequence"`
	Kind      string     `json:"kind"`
	Synthetic bool       `json:"synthetic"`
	Payload   any        `json:"payload"`
	Media     *jsonMedia `json:"media"`
	Error     *jsonError `json:"error"`
}

// jsonMedia is a frame's media. Inline media carries data as a digest
// (size and sha256) instead of its bytes; blob media is passed on as is.
type jsonMedia struct {
	Kind             string    `json:"kind"`
	MediaType        string    `json:"media_type"`
	Codec            string    `json:"codec,omitempty"`
	SampleRate       int64     `json:"sample_rate,omitempty"`
	Channels         int64     `json:"channels,omitempty"`
	TimestampSeconds *float64  `json:"timestamp_seconds,omitempty"`
	DurationSeconds  *float64  `json:"duration_seconds,omitempty"`
	Data             *jsonData `json:"data,omitempty"`
	BlobID           string    `json:"blob_id,omitempty"`
	SizeBytes        *int64    `json:"size_bytes,omitempty"`
	SHA256           string    `json:"sha256,omitempty"`
}

// jsonData stands in for inline media bytes.
type jsonData struct {
	Size   int    `json:"size"`
	SHA256 string `json:"sha256"`
	// File is where --save-media wrote the bytes; absent without it.
	File string `json:"file,omitempty"`
}

type jsonError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// lineEncoder writes frames as JSON lines. It is not safe for concurrent
// use.
type lineEncoder struct {
	w   io.Writer
	buf bytes.Buffer
	enc *json.Encoder
}

func newLineEncoder(w io.Writer) *lineEncoder {
	e := &lineEncoder{w: w}
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false)
	return e
}

// encode writes f as one line. savedFile, when not empty, is where the
// frame's inline media was saved.
func (e *lineEncoder) encode(f frame.Frame, savedFile string) error {
	jf, err := toJSONFrame(f, savedFile)
	if err != nil {
		return err
	}
	e.buf.Reset()
	if err := e.enc.Encode(jf); err != nil {
		return fmt.Errorf("encode frame %d as JSON: %w", f.Sequence, err)
	}
	_, err = e.w.Write(e.buf.Bytes())
	return err
}

func toJSONFrame(f frame.Frame, savedFile string) (jsonFrame, error) {
	jf := jsonFrame{
		CallID:    f.CallID,
		Direction: f.Direction.String(),
		Sequence:  f.Sequence,
		Kind:      f.Kind.String(),
		Synthetic: f.Synthetic,
	}
	if f.Payload != nil {
		m, err := f.Payload.Map()
		if err != nil {
			return jsonFrame{}, fmt.Errorf("frame %d: payload: %w", f.Sequence, err)
		}
		jf.Payload = m
	}
	switch m := f.Media.(type) {
	case *frame.InlineMedia:
		jf.Media = &jsonMedia{
			Kind: "inline", MediaType: m.MediaType, Codec: m.Codec,
			SampleRate: m.SampleRate, Channels: m.Channels,
			TimestampSeconds: m.TimestampSeconds, DurationSeconds: m.DurationSeconds,
			Data: &jsonData{Size: len(m.Data), SHA256: sha256Hex(m.Data), File: savedFile},
		}
	case *frame.BlobMedia:
		size := m.SizeBytes
		jf.Media = &jsonMedia{Kind: "blob", MediaType: m.MediaType, BlobID: m.BlobID, SizeBytes: &size, SHA256: m.SHA256}
	}
	if f.Error != nil {
		jf.Error = &jsonError{Code: f.Error.Code.String(), Message: f.Error.Message}
	}
	return jf, nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// compactJSON renders a payload as compact JSON for people.
func compactJSON(p frame.Payload) string {
	m, err := p.Map()
	if err != nil {
		return "<payload that has no JSON form>"
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return "<payload that has no JSON form>"
	}
	return string(bytes.TrimRight(buf.Bytes(), "\n"))
}
