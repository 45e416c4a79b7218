package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/frame/mpack"
	"github.com/skulkrt/skulk/wire/internal/protocol"
	"github.com/vmihailenco/msgpack/v5"
)

// AppendPacket appends p's length prefix and header to b and returns the
// extended slice and the attachment to write after it (nil for none; the
// attachment is p's own media data, not a copy). It validates p first:
// frames must pass frame.Validate and must not be synthetic.
//
// Header and attachment lengths are checked against l, whose zero fields
// mean the defaults (64 KiB of header, 16 MiB of attachment) and whose
// fields are clamped to the hard ceilings (1 MiB, 256 MiB).
//
// Errors: an error matching frame.ErrInvalid (errors.As finds the
// *frame.FieldError) for a frame or invoke that breaks the rules, one
// matching ErrTooLarge for a packet over the limits; b is then returned
// as it came. To write a packet, write the header bytes and then the
// attachment; for the whole packet in one slice,
//
//	hdr, att, err := wire.AppendPacket(nil, p, wire.Limits{})
//	pkt := append(hdr, att...)
func AppendPacket(b []byte, p Packet, l Limits) ([]byte, []byte, error) {
	l = l.effective()
	start := len(b)
	b = append(b, make([]byte, protocol.PrefixLen)...)
	var att []byte
	var err error
	switch p := p.(type) {
	case *Frame:
		b, att, err = appendFrame(b, &p.Frame)
	case *End:
		if err = checkCallID(p.CallID); err != nil {
			err = &protocol.InvalidError{Type: protocol.TypeEnd, Err: err}
			break
		}
		b = mpack.AppendMapHeader(b, 2)
		b = appendKey(b, "t", "end")
		b = appendKey(b, "call_id", p.CallID)
	case *Invoke:
		b, err = appendInvoke(b, p)
	case *Ping:
		b = mpack.AppendMapHeader(b, 2)
		b = appendKey(b, "t", "ping")
		b = mpack.AppendUint(mpack.AppendString(b, "nonce"), p.Nonce)
	case *Pong:
		b = mpack.AppendMapHeader(b, 4)
		b = appendKey(b, "t", "pong")
		b = mpack.AppendUint(mpack.AppendString(b, "nonce"), p.Nonce)
		b = mpack.AppendInt(mpack.AppendString(b, "streams"), p.Streams)
		b = mpack.AppendInt(mpack.AppendString(b, "stuck"), p.Stuck)
	case *Cancel:
		if err = checkCallID(p.CallID); err != nil {
			err = &protocol.InvalidError{Type: protocol.TypeCancel, Err: err}
			break
		}
		b = mpack.AppendMapHeader(b, 2+boolInt(p.Reason != ""))
		b = appendKey(b, "t", "cancel")
		b = appendKey(b, "call_id", p.CallID)
		if p.Reason != "" {
			b = appendKey(b, "reason", p.Reason)
		}
	case *Drain:
		b = mpack.AppendMapHeader(b, 2)
		b = appendKey(b, "t", "drain")
		b = mpack.AppendInt(mpack.AppendString(b, "grace_ms"), p.GraceMS)
	case *Bye:
		b = mpack.AppendMapHeader(b, 1+boolInt(p.Reason != ""))
		b = appendKey(b, "t", "bye")
		if p.Reason != "" {
			b = appendKey(b, "reason", p.Reason)
		}
	case *Startup:
		if p.Calls != nil {
			if err = p.Calls.validate(); err != nil {
				break
			}
		}
		b = mpack.AppendMapHeader(b, 7+boolInt(p.Calls != nil)+boolInt(p.ToolsUpdates))
		b = appendKey(b, "t", "startup")
		b = mpack.AppendInt(mpack.AppendString(b, "protocol"), p.Protocol)
		b = appendKey(b, "child_id", p.ChildID)
		b = appendLimits(mpack.AppendString(b, "limits"), p.Limits)
		b = mpack.AppendInt(mpack.AppendString(b, "health_interval_ms"), p.HealthIntervalMS)
		b = mpack.AppendInt(mpack.AppendString(b, "cancel_grace_ms"), p.CancelGraceMS)
		b = mpack.AppendInt(mpack.AppendString(b, "ingress_queue"), p.IngressQueue)
		if p.Calls != nil {
			b, err = appendCalls(mpack.AppendString(b, "calls"), p.Calls)
		}
		// Only when true, so that a startup without it encodes as one of
		// a host that does not know the key.
		if err == nil && p.ToolsUpdates {
			b = mpack.AppendBool(mpack.AppendString(b, "tools_updates"), true)
		}
	case *Hello:
		b, err = appendHello(b, p)
	case *Tools:
		b, err = appendToolList(b, p)
	default:
		err = fmt.Errorf("wire: cannot encode a %T", p)
	}
	if err != nil {
		return b[:start], nil, err
	}
	h := len(b) - start - protocol.PrefixLen
	if h > int(l.MaxHeader) {
		return b[:start], nil, protocol.LengthError(protocol.ErrHeaderLength, uint64(h), l.MaxHeader)
	}
	if len(att) > int(l.MaxAttachment) {
		return b[:start], nil, protocol.LengthError(protocol.ErrAttachmentLength, uint64(len(att)), l.MaxAttachment)
	}
	binary.BigEndian.PutUint32(b[start:], uint32(h))
	binary.BigEndian.PutUint32(b[start+4:], uint32(len(att)))
	return b, att, nil
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

func appendKey(b []byte, key, val string) []byte {
	return mpack.AppendString(mpack.AppendString(b, key), val)
}

func appendLimits(b []byte, l Limits) []byte {
	b = mpack.AppendMapHeader(b, 2)
	b = mpack.AppendUint(mpack.AppendString(b, "max_header"), uint64(l.MaxHeader))
	return mpack.AppendUint(mpack.AppendString(b, "max_attachment"), uint64(l.MaxAttachment))
}

// The parts of a frame header that are the same in every frame, encoded
// once: every small frame's header is mostly these.
var (
	// encFrameHead is "t": "frame", then the key "call_id".
	encFrameHead = mpack.AppendString(appendKey(nil, "t", "frame"), "call_id")
	// encDirections[d] is "direction": d, then the key "sequence".
	encDirections = [...][]byte{
		frame.CallerToProvider: encDirection(frame.CallerToProvider),
		frame.ProviderToCaller: encDirection(frame.ProviderToCaller),
	}
	// encKinds[k] is "kind": k.
	encKinds = [...][]byte{
		frame.KindStarted:   appendKey(nil, "kind", frame.KindStarted.String()),
		frame.KindChunk:     appendKey(nil, "kind", frame.KindChunk.String()),
		frame.KindCompleted: appendKey(nil, "kind", frame.KindCompleted.String()),
		frame.KindFailed:    appendKey(nil, "kind", frame.KindFailed.String()),
		frame.KindCancelled: appendKey(nil, "kind", frame.KindCancelled.String()),
	}
	encPayloadKey = mpack.AppendString(nil, "payload")
	encKindKey    = mpack.AppendString(nil, "kind")
)

func encDirection(d frame.Direction) []byte {
	return mpack.AppendString(appendKey(nil, "direction", d.String()), "sequence")
}

func appendFrame(b []byte, f *frame.Frame) ([]byte, []byte, error) {
	if err := f.Validate(); err != nil {
		return b, nil, &protocol.InvalidError{Type: protocol.TypeFrame, CallID: validCallID(f.CallID), Err: err}
	}
	if f.Synthetic {
		return b, nil, &protocol.InvalidError{Type: protocol.TypeFrame, CallID: f.CallID,
			Err: &frame.FieldError{Field: "synthetic", Reason: "synthetic frames never travel on the wire"}}
	}
	n := 5 + boolInt(f.Payload != nil) + boolInt(f.Media != nil) + boolInt(f.Error != nil)
	b = mpack.AppendMapHeader(b, n)
	// Validate checked the direction and the kind: they index the tables.
	b = append(b, encFrameHead...)
	b = mpack.AppendString(b, f.CallID)
	b = append(b, encDirections[f.Direction]...)
	b = mpack.AppendUint(b, f.Sequence)
	b = append(b, encKinds[f.Kind]...)
	if f.Payload != nil {
		b = append(append(b, encPayloadKey...), f.Payload...)
	}
	var att []byte
	if f.Media != nil {
		b = mpack.AppendString(b, "media")
		switch m := f.Media.(type) {
		case *frame.InlineMedia:
			n := 2 + boolInt(m.Codec != "") + boolInt(m.SampleRate != 0) + boolInt(m.Channels != 0) +
				boolInt(m.TimestampSeconds != nil) + boolInt(m.DurationSeconds != nil)
			b = mpack.AppendMapHeader(b, n)
			b = appendKey(b, "kind", "inline")
			b = appendKey(b, "media_type", m.MediaType)
			if m.Codec != "" {
				b = appendKey(b, "codec", m.Codec)
			}
			if m.SampleRate != 0 {
				b = mpack.AppendInt(mpack.AppendString(b, "sample_rate"), m.SampleRate)
			}
			if m.Channels != 0 {
				b = mpack.AppendInt(mpack.AppendString(b, "channels"), m.Channels)
			}
			if m.TimestampSeconds != nil {
				b = mpack.AppendFloat64(mpack.AppendString(b, "timestamp_seconds"), *m.TimestampSeconds)
			}
			if m.DurationSeconds != nil {
				b = mpack.AppendFloat64(mpack.AppendString(b, "duration_seconds"), *m.DurationSeconds)
			}
			att = m.Data
		case *frame.BlobMedia:
			b = mpack.AppendMapHeader(b, 5)
			b = appendKey(b, "kind", "blob")
			b = appendKey(b, "blob_id", m.BlobID)
			b = mpack.AppendInt(mpack.AppendString(b, "size_bytes"), m.SizeBytes)
			b = appendKey(b, "sha256", m.SHA256)
			b = appendKey(b, "media_type", m.MediaType)
		}
	}
	if f.Error != nil {
		b = mpack.AppendString(b, "error")
		b = mpack.AppendMapHeader(b, 2)
		b = appendKey(b, "code", f.Error.Code.String())
		b = appendKey(b, "message", f.Error.Message)
	}
	return b, att, nil
}

func validCallID(id string) string {
	if checkCallID(id) != nil {
		return ""
	}
	return id
}

func appendInvoke(b []byte, p *Invoke) ([]byte, error) {
	if err := p.validate(); err != nil {
		return b, &protocol.InvalidError{Type: protocol.TypeInvoke, CallID: validCallID(p.CallID), Err: err}
	}
	n := 5 + boolInt(p.Trace != nil) + boolInt(p.Tree != "") + boolInt(p.Parent != "") + boolInt(p.Depth > 0) + boolInt(p.Detached)
	b = mpack.AppendMapHeader(b, n)
	b = appendKey(b, "t", "invoke")
	b = appendKey(b, "call_id", p.CallID)
	b = appendKey(b, "tool_id", p.ToolID)
	b = mpack.AppendString(b, "arguments")
	if p.Arguments == nil {
		b = mpack.AppendMapHeader(b, 0)
	} else {
		b = append(b, p.Arguments...)
	}
	b = mpack.AppendInt(mpack.AppendString(b, "timeout_ms"), p.TimeoutMS)
	if p.Trace != nil {
		b = mpack.AppendString(b, "trace")
		b = mpack.AppendMapHeader(b, len(p.Trace))
		var buf [4]string // traceparent, tracestate, baggage: no allocation for W3C trace context
		for _, k := range sortedKeys(buf[:0], p.Trace) {
			b = appendKey(b, k, p.Trace[k])
		}
	}
	if p.Tree != "" {
		b = appendKey(b, "tree", p.Tree)
	}
	if p.Parent != "" {
		b = appendKey(b, "parent", p.Parent)
	}
	if p.Depth > 0 {
		b = mpack.AppendInt(mpack.AppendString(b, "depth"), p.Depth)
	}
	if p.Detached {
		b = mpack.AppendBool(mpack.AppendString(b, "detached"), true)
	}
	return b, nil
}

// appendCalls appends startup's calls map; c is valid.
func appendCalls(b []byte, c *Calls) ([]byte, error) {
	b = mpack.AppendMapHeader(b, 4)
	b = appendKey(b, "socket", c.Socket)
	b = mpack.AppendArrayHeader(mpack.AppendString(b, "tools"), len(c.Tools))
	for i := range c.Tools {
		var err error
		if b, err = appendTool(b, &c.Tools[i]); err != nil {
			return b, fmt.Errorf("wire: calls tool %d: %w", i, err)
		}
	}
	b = mpack.AppendInt(mpack.AppendString(b, "max_depth"), c.MaxDepth)
	b = mpack.AppendInt(mpack.AppendString(b, "max_in_flight"), c.MaxInFlight)
	return b, nil
}

// validate checks the calls map's fields: a socket path of 1 to
// protocol.MaxSocketPath bytes, at most 4,096 tools, MaxDepth and MaxInFlight ≥ 1.
// The error is a *frame.FieldError naming the field.
func (c *Calls) validate() error {
	switch {
	case c.Socket == "" || len(c.Socket) > protocol.MaxSocketPath:
		return &frame.FieldError{Field: "calls.socket", Reason: "must be 1 to 107 bytes"}
	case len(c.Tools) > maxTools:
		return &frame.FieldError{Field: "calls.tools", Reason: "more than 4096 tools"}
	case c.MaxDepth < 1:
		return &frame.FieldError{Field: "calls.max_depth", Reason: "must be >= 1"}
	case c.MaxInFlight < 1:
		return &frame.FieldError{Field: "calls.max_in_flight", Reason: "must be >= 1"}
	}
	return nil
}

// validate checks the invoke's fields; the error is a *frame.FieldError.
// Nil Arguments are allowed and sent as an empty object.
func (p *Invoke) validate() error {
	if err := checkCallID(p.CallID); err != nil {
		return err
	}
	if err := checkID("tool_id", p.ToolID); err != nil {
		return err
	}
	if p.Arguments != nil {
		if err := renamed(checkPayload(p.Arguments), "arguments"); err != nil {
			return err
		}
	}
	if p.TimeoutMS < 0 {
		return &frame.FieldError{Field: "timeout_ms", Reason: "must be >= 0"}
	}
	if p.Tree != "" {
		if err := checkID("tree", p.Tree); err != nil {
			return err
		}
	}
	if p.Parent != "" {
		if err := checkID("parent", p.Parent); err != nil {
			return err
		}
	}
	if p.Depth < 0 {
		return &frame.FieldError{Field: "depth", Reason: "must be >= 0"}
	}
	return nil
}

// maxIDChars bounds a call id and every id that follows its rule (tool
// ids): 1 to 128 characters of valid UTF-8 (docs/protocol.md §3).
const maxIDChars = 128

// checkPayload checks a payload as frame.Frame.Validate does: one
// MessagePack map with a JSON form; the error is a *frame.FieldError naming
// payload.
func checkPayload(p frame.Payload) error {
	switch err := mpack.CheckObject(p); {
	case err == nil:
		return nil
	case errors.Is(err, mpack.ErrType):
		return &frame.FieldError{Field: "payload", Reason: "not a map"}
	case errors.Is(err, mpack.ErrDepth):
		return &frame.FieldError{Field: "payload", Reason: "nested too deeply"}
	case errors.Is(err, mpack.ErrNotJSON):
		return &frame.FieldError{Field: "payload", Reason: "has a value with no JSON form"}
	}
	return &frame.FieldError{Field: "payload", Reason: "malformed MessagePack"}
}

// checkCallID checks a call id: 1 to 128 characters of valid UTF-8; the
// error is the *frame.FieldError frame.Frame.Validate gives for call_id.
func checkCallID(id string) error { return checkID("call_id", id) }

// checkID checks an id that follows the call id's rule (1 to 128 characters
// of valid UTF-8); the error is a *frame.FieldError naming field.
func checkID(field, id string) error {
	switch {
	case !utf8.ValidString(id):
		return &frame.FieldError{Field: field, Reason: "not valid UTF-8"}
	case id == "":
		return &frame.FieldError{Field: field, Reason: "empty"}
	case len(id) > maxIDChars && utf8.RuneCountInString(id) > maxIDChars:
		// A string of at most maxIDChars bytes has at most maxIDChars characters.
		return &frame.FieldError{Field: field, Reason: "too long"}
	}
	return nil
}

// renamed returns err, nil or a *frame.FieldError, as a FieldError of field.
func renamed(err error, field string) error {
	if err == nil {
		return nil
	}
	return &frame.FieldError{Field: field, Reason: err.(*frame.FieldError).Reason}
}

func appendHello(b []byte, p *Hello) ([]byte, error) {
	b = mpack.AppendMapHeader(b, 7)
	b = appendKey(b, "t", "hello")
	b = mpack.AppendArrayHeader(mpack.AppendString(b, "protocol"), len(p.Protocol))
	for _, v := range p.Protocol {
		b = mpack.AppendInt(b, v)
	}
	b = appendKey(b, "sdk", p.SDK)
	b = mpack.AppendInt(mpack.AppendString(b, "pid"), p.PID)
	b = mpack.AppendInt(mpack.AppendString(b, "max_streams"), p.MaxStreams)
	b = appendLimits(mpack.AppendString(b, "limits"), p.Limits)
	b = mpack.AppendArrayHeader(mpack.AppendString(b, "tools"), len(p.Tools))
	for i := range p.Tools {
		var err error
		if b, err = appendTool(b, &p.Tools[i]); err != nil {
			return b, fmt.Errorf("wire: tool %d: %w", i, err)
		}
	}
	return b, nil
}

// appendToolList encodes a tools packet: at most maxTools tools, each
// with a valid id.
func appendToolList(b []byte, p *Tools) ([]byte, error) {
	if len(p.Tools) > maxTools {
		return b, &frame.FieldError{Field: "tools", Reason: "more than 4096 tools"}
	}
	b = mpack.AppendMapHeader(b, 2)
	b = appendKey(b, "t", "tools")
	b = mpack.AppendArrayHeader(mpack.AppendString(b, "tools"), len(p.Tools))
	for i := range p.Tools {
		var err error
		if b, err = appendTool(b, &p.Tools[i]); err != nil {
			return b, fmt.Errorf("wire: tool %d: %w", i, err)
		}
	}
	return b, nil
}

// appendTool appends t as hello carries it, a msgpack map, to b. The
// encoding is canonical (map keys sorted at every depth, numbers compact),
// so equal descriptors encode to equal bytes whatever the order their maps
// were built in: the Go child SDK hashes it for a tool that names no version. Errors: an id that breaks
// the rules, or a schema holding a value msgpack cannot encode.
func appendTool(b []byte, t *Tool) ([]byte, error) {
	if err := checkID("tools.id", t.ID); err != nil {
		return b, err
	}
	schemas := [...]struct {
		key string
		s   map[string]any
	}{{"arguments_schema", t.ArgumentsSchema}, {"input_schema", t.InputSchema}, {"output_schema", t.OutputSchema}, {"result_schema", t.ResultSchema}}
	n := 1 + boolInt(t.Version != "") + boolInt(t.Description != "") + boolInt(t.InputMedia) + boolInt(t.NoInput)
	for _, s := range schemas {
		n += boolInt(s.s != nil)
	}
	b = mpack.AppendMapHeader(b, n)
	b = appendKey(b, "id", t.ID)
	if t.Version != "" {
		b = appendKey(b, "version", t.Version)
	}
	if t.Description != "" {
		b = appendKey(b, "description", t.Description)
	}
	for _, s := range schemas {
		if s.s == nil {
			continue
		}
		enc, err := encodeValue(s.s)
		if err != nil {
			return b, fmt.Errorf("%s: %w", s.key, err)
		}
		b = append(mpack.AppendString(b, s.key), enc...)
	}
	// Only when true, so that a descriptor without them encodes (and
	// derives its version) as before they existed.
	if t.InputMedia {
		b = mpack.AppendBool(mpack.AppendString(b, "input_media"), true)
	}
	if t.NoInput {
		b = mpack.AppendBool(mpack.AppendString(b, "no_input"), true)
	}
	return b, nil
}

// encodeValue encodes a generic value canonically (sorted map keys, compact
// numbers).
func encodeValue(v any) ([]byte, error) {
	if b, ok := mpack.AppendValue(make([]byte, 0, 64), v); ok {
		return b, nil // the library's bytes, without its reflection
	}
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	enc.UseCompactInts(true)
	enc.UseCompactFloats(true)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// sortedKeys appends m's keys to dst and sorts them.
func sortedKeys(dst []string, m map[string]string) []string {
	dst = slices.AppendSeq(dst, maps.Keys(m))
	slices.Sort(dst)
	return dst
}
