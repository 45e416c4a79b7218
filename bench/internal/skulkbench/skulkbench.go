// Package skulkbench holds the Skulk benchmark child's tools: count, media,
// echo and sleep doing as little work of their own as gpchild's and
// mcpchild's do, so that the benchmark measures the runtime and not the
// tools. (cmd/skulk-child's demo tools check their arguments, hash their
// media and declare output schemas; the compare driver measures them too,
// as the "skulk-demo" system.)
//
// The tools declare no output or result schema, as gRPC's raw bytes carry
// none: the host has nothing to validate them against.
package skulkbench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"time"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/vmihailenco/msgpack/v5"
)

// Limits of the tools' arguments, also in their schemas.
const (
	// MaxPad bounds count's padding.
	MaxPad = 60000
	// MaxChunk bounds media's chunk: the default max_attachment.
	MaxChunk = protocol.DefaultMaxAttachment
	// MaxStreams is the bench child's max_streams: twice the default, so
	// that the concurrency sweep's 4,096 streams leave room for the small
	// calls it makes alongside them.
	MaxStreams = 2 * 4096
)

// errArgs is the failure of a call whose arguments are out of range.
var errArgs = &frame.Error{Code: frame.CodeProviderError, Message: "arguments out of range"}

func object(props map[string]any, required ...any) map[string]any {
	s := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

func integer(min, max int64) map[string]any {
	return map[string]any{"type": "integer", "minimum": min, "maximum": max}
}

// Tools returns the bench tools.
func Tools() []child.Tool {
	return []child.Tool{
		{
			ID:              "count",
			Description:     `Sends n chunks {"i": i, "pad": size characters} (i as a uint32, so every chunk has the same length); needs no input.`,
			ArgumentsSchema: object(map[string]any{"n": integer(0, 1<<32-1), "size": integer(0, MaxPad)}, "n", "size"),
			Handler:         count,
		},
		{
			ID:              "media",
			Description:     "Sends inline media chunks of zero bytes totalling bytes.",
			ArgumentsSchema: object(map[string]any{"bytes": integer(0, 1<<40), "chunk": integer(1, MaxChunk)}, "bytes", "chunk"),
			Handler:         media,
		},
		{
			ID:              "echo",
			Description:     "Sends each caller chunk back; completes when the caller completes.",
			ArgumentsSchema: object(map[string]any{}),
			Handler:         echo,
		},
		{
			ID:              "reply",
			Description:     "Completes with its arguments as its value; reads no input.",
			ArgumentsSchema: object(map[string]any{"text": map[string]any{"type": "string"}}, "text"),
			Handler:         reply,
		},
		{
			ID:              "nest",
			Description:     "Calls tool through the host with args and completes with {ns, value}: how long that call took as the handler saw it, and its value; reads no input.",
			ArgumentsSchema: object(map[string]any{"tool": map[string]any{"type": "string"}, "args": map[string]any{"type": "object"}}, "tool", "args"),
			Handler:         nest,
		},
		{
			ID:              "sleep",
			Description:     "Waits ms milliseconds or until cancelled.",
			ArgumentsSchema: object(map[string]any{"ms": integer(0, 1<<31)}, "ms"),
			Handler:         sleep,
		},
	}
}

// countPayload appends {"i": i, "pad": pad} as msgpack to b, with i always
// a uint32 so every chunk has the same length.
func countPayload(b []byte, i uint32, pad string) frame.Payload {
	b = append(b, 0x82, 0xa1, 'i', 0xce)
	b = binary.BigEndian.AppendUint32(b, i)
	b = append(b, 0xa3, 'p', 'a', 'd')
	switch n := len(pad); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 256:
		b = append(b, 0xd9, byte(n))
	default:
		b = append(b, 0xda, byte(n>>8), byte(n))
	}
	return append(b, pad...)
}

func count(ctx context.Context, s *child.Stream) (frame.Payload, error) {
	var a struct {
		N    int64 `json:"n"`
		Size int64 `json:"size"`
	}
	if err := s.Arguments().Decode(&a); err != nil || a.N < 0 || a.N >= 1<<32 || a.Size < 0 || a.Size > MaxPad {
		return nil, errArgs
	}
	pad := string(make([]byte, a.Size))
	buf := make([]byte, 0, 16+len(pad))
	for i := range a.N {
		// One buffer for every chunk: Send has encoded the payload when
		// it returns (gpchild makes a new message each time because
		// gRPC's SendMsg may keep its bytes after it returns).
		buf = countPayload(buf[:0], uint32(i), pad)
		if err := s.Send(buf, nil); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

func media(ctx context.Context, s *child.Stream) (frame.Payload, error) {
	var a struct {
		Bytes int64 `json:"bytes"`
		Chunk int64 `json:"chunk"`
	}
	if err := s.Arguments().Decode(&a); err != nil || a.Bytes < 0 || a.Chunk < 1 || a.Chunk > MaxChunk {
		return nil, errArgs
	}
	// One buffer for every chunk: Send returns once inline bytes are
	// written.
	buf := make([]byte, min(a.Chunk, max(a.Bytes, 1)))
	for off := int64(0); off < a.Bytes; {
		n := min(a.Chunk, a.Bytes-off)
		if err := s.Send(nil, &frame.InlineMedia{Data: buf[:n], MediaType: "application/octet-stream"}); err != nil {
			return nil, err
		}
		off += n
	}
	return nil, nil
}

func echo(ctx context.Context, s *child.Stream) (frame.Payload, error) {
	for f, err := range s.Input() {
		if err != nil {
			return nil, err
		}
		if err := s.Send(f.Payload, f.Media); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

func reply(ctx context.Context, s *child.Stream) (frame.Payload, error) {
	return s.Arguments(), nil
}

// nest makes one call through the host (docs/protocol.md §8), a nested
// small call in the unary shape, and completes with {"ns": n, "value":
// v}: the nanoseconds from its Call to its terminal, as the handler (the
// nested call's caller) saw them, and the nested call's value.
func nest(ctx context.Context, s *child.Stream) (frame.Payload, error) {
	// The arguments are read as MessagePack, args kept as the bytes they
	// came as (a relay does not look into what it passes on); the SDK
	// checks them as the call's arguments.
	var a struct {
		Tool string             `msgpack:"tool"`
		Args msgpack.RawMessage `msgpack:"args"`
	}
	if err := msgpack.Unmarshal(s.Arguments(), &a); err != nil || a.Tool == "" {
		return nil, errArgs
	}
	var args frame.Payload
	if len(a.Args) > 0 && !bytes.Equal(a.Args, []byte{0xc0}) { // absent or nil: no arguments
		args = frame.Payload(a.Args)
	}
	// Unary-shaped, as the host's own unary call: the invoke and the
	// closed input leave in one write.
	t0 := time.Now()
	c, err := s.Call(ctx, a.Tool, args, child.WithInput())
	if err != nil {
		return nil, err
	}
	v, err := c.Wait()
	took := time.Since(t0)
	if err != nil {
		return nil, err
	}
	return NestReply(took, v), nil
}

// NestReply is nest's value: {"ns": took in nanoseconds, "value": v}, v
// nil when the nested call completed without a value.
func NestReply(took time.Duration, v frame.Payload) frame.Payload {
	b := make([]byte, 0, 16+len(v))
	b = append(b, 0x82, 0xa2, 'n', 's', 0xcf)
	b = binary.BigEndian.AppendUint64(b, uint64(took))
	b = append(b, 0xa5, 'v', 'a', 'l', 'u', 'e')
	if len(v) == 0 {
		return append(b, 0xc0)
	}
	return append(b, v...)
}

// ParseNestReply reads nest's value, as NestReply lays it out: how long
// the nested call took and its value (nil for none). It decodes the
// fixed layout by hand, so that reading it adds nothing to the call it
// times beyond a few comparisons.
func ParseNestReply(p frame.Payload) (time.Duration, frame.Payload, error) {
	const head = 5 + 8 + 6 // map of 2, "ns", uint64 marker, the value, "value"
	if len(p) <= head || !bytes.Equal(p[:5], []byte{0x82, 0xa2, 'n', 's', 0xcf}) ||
		!bytes.Equal(p[13:head], []byte{0xa5, 'v', 'a', 'l', 'u', 'e'}) {
		return 0, nil, errNestReply
	}
	took := time.Duration(binary.BigEndian.Uint64(p[5:13]))
	if v := p[head:]; !(len(v) == 1 && v[0] == 0xc0) {
		return took, frame.Payload(v), nil
	}
	return took, nil, nil
}

// errNestReply is ParseNestReply's error for a value nest does not make.
var errNestReply = errors.New("skulkbench: nest's value is not {ns, value}")

func sleep(ctx context.Context, s *child.Stream) (frame.Payload, error) {
	var a struct {
		MS int64 `json:"ms"`
	}
	if err := s.Arguments().Decode(&a); err != nil || a.MS < 0 {
		return nil, errArgs
	}
	t := time.NewTimer(time.Duration(a.MS) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil, nil
	case <-ctx.Done():
		return nil, errors.New("cancelled")
	}
}
