// Package demotools holds the demonstration tools that skulk-child serves:
// echo, upper, count, media, sleep, fail, relay (a call through the host)
// and, for tests, crash. docs/demo-tools.md describes each tool's arguments
// and output.
//
// Serve them from any binary to get a provider with known behaviour, for a
// demo or for a host's integration tests:
//
//	os.Exit(child.Run(child.Options{Tools: demotools.Tools(demotools.Options{})}))
//
// Every binary of this module that serves as a child (skulk-child, and
// skulk-host re-executing itself) offers these very tools.
package demotools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/frame/mpack"
	"github.com/skulkrt/skulk/internal/protocol"
)

// Limits of the tools' arguments, also stated in their schemas.
const (
	// maxCountSize bounds count's padding, so a chunk's header stays well
	// under the default max_header (64 KiB).
	maxCountSize = 60000
	// defaultMediaChunk is media's chunk size when the arguments give none.
	defaultMediaChunk = 65536
	// maxMediaChunk bounds media's chunk size: the default max_attachment.
	maxMediaChunk = protocol.DefaultMaxAttachment
	// MediaType is the media type of media's chunks.
	MediaType = "application/octet-stream"
)

// Options choose which tools Tools returns.
type Options struct {
	// TestTools adds what only tests need: sleep's ignore_cancel argument,
	// and crash when Exit is set. False means the production set.
	TestTools bool
	// Exit ends the process with a status; crash calls it with 3 after its
	// chunks are written. nil means crash is not offered (os.Exit belongs
	// in main packages, which pass it here).
	Exit func(code int)
	// CallTools adds relay, which calls another tool through the host
	// (docs/protocol.md §8). False leaves it out.
	CallTools bool
}

// Tools returns the demo tools.
func Tools(opts Options) []child.Tool {
	tools := []child.Tool{echo(), upper(), count(), media(), sleep(opts.TestTools), fail()}
	if opts.TestTools && opts.Exit != nil {
		tools = append(tools, crash(opts.Exit))
	}
	if opts.CallTools {
		tools = append(tools, relay(opts.TestTools))
	}
	return tools
}

func object(props map[string]any, required ...string) map[string]any {
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		req := make([]any, len(required))
		for i, r := range required {
			req[i] = r
		}
		s["required"] = req
	}
	return s
}

func integer(min, max int64, def *int64) map[string]any {
	s := map[string]any{"type": "integer", "minimum": min}
	if max > 0 {
		s["maximum"] = max
	}
	if def != nil {
		s["default"] = *def
	}
	return s
}

func ptr(v int64) *int64 { return &v }

// anyObject is the schema of a payload that may be any JSON object.
func anyObject() map[string]any { return map[string]any{"type": "object"} }

func echo() child.Tool {
	return child.Tool{
		ID:              "echo",
		Description:     "Streams each caller chunk back, payload and inline media alike; completes when the caller completes.",
		ArgumentsSchema: object(map[string]any{}),
		InputSchema:     anyObject(),
		OutputSchema:    anyObject(),
		ResultSchema:    object(map[string]any{"chunks": integer(0, 0, nil)}, "chunks"),
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			n := 0
			for f, err := range s.Input() {
				if err != nil {
					return nil, err
				}
				if err := s.Send(f.Payload, f.Media); err != nil {
					return nil, err
				}
				n++
			}
			return frame.MustPayload(map[string]any{"chunks": n}), nil
		},
	}
}

func upper() child.Tool {
	text := object(map[string]any{"text": map[string]any{"type": "string"}}, "text")
	return child.Tool{
		ID:              "upper",
		Description:     `Turns caller chunks {"text": s} into provider chunks {"text": upper(s)}.`,
		ArgumentsSchema: object(map[string]any{}),
		InputSchema:     text,
		OutputSchema:    text,
		ResultSchema:    object(map[string]any{"chunks": integer(0, 0, nil)}, "chunks"),
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			n := 0
			for f, err := range s.Input() {
				if err != nil {
					return nil, err
				}
				t, ok := f.Payload.Text()
				if !ok {
					return nil, &frame.Error{Code: frame.CodeProviderError, Message: "chunk has no text"}
				}
				if err := s.Send(frame.MustPayload(map[string]any{"text": strings.ToUpper(t)}), nil); err != nil {
					return nil, err
				}
				n++
			}
			return frame.MustPayload(map[string]any{"chunks": n}), nil
		},
	}
}

type countArgs struct {
	N    int64 `json:"n"`
	Size int64 `json:"size"`
}

func count() child.Tool {
	return child.Tool{
		ID:          "count",
		NoInput:     true,
		Description: `Sends n chunks {"i": i} numbered from 0, each padded with "pad" of size bytes; needs no caller input.`,
		ArgumentsSchema: object(map[string]any{
			"n":    integer(0, 0, nil),
			"size": integer(0, maxCountSize, ptr(0)),
		}, "n"),
		InputSchema: anyObject(),
		OutputSchema: object(map[string]any{
			"i":   integer(0, 0, nil),
			"pad": map[string]any{"type": "string"},
		}, "i"),
		ResultSchema: object(map[string]any{"n": integer(0, 0, nil)}, "n"),
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			var a countArgs
			if err := s.Arguments().Decode(&a); err != nil || a.N < 0 || a.Size < 0 || a.Size > maxCountSize {
				return nil, &frame.Error{Code: frame.CodeProviderError, Message: "arguments: n must be >= 0, size in [0, 60000]"}
			}
			pad := strings.Repeat("x", int(a.Size))
			keys := 1
			if a.Size > 0 {
				keys = 2
			}
			// Each chunk's MessagePack is appended into one buffer: Send
			// has encoded the payload when it returns. Built as a map and
			// encoded by reflection, a chunk cost the child four times
			// the CPU the rest of a frame costs it, and the stream ran at
			// half the rate (docs/performance.md).
			buf := make([]byte, 0, 16+len(pad))
			for i := range a.N {
				buf = mpack.AppendMapHeader(buf[:0], keys)
				buf = mpack.AppendString(buf, "i")
				buf = mpack.AppendInt(buf, i)
				if a.Size > 0 {
					buf = mpack.AppendString(buf, "pad")
					buf = mpack.AppendString(buf, pad)
				}
				if err := s.Send(buf, nil); err != nil {
					return nil, err
				}
			}
			return frame.MustPayload(map[string]any{"n": a.N}), nil
		},
	}
}

type mediaArgs struct {
	Bytes int64 `json:"bytes"`
	Chunk int64 `json:"chunk"`
}

// MediaByte is the byte at offset i of media's output: a pattern that
// tests can recompute.
func MediaByte(i int64) byte { return byte(i % mediaPeriod) }

// mediaPeriod is the length of media's repeating pattern.
const mediaPeriod = 251

func media() child.Tool {
	return child.Tool{
		ID:          "media",
		NoInput:     true,
		Description: "Sends inline media chunks (application/octet-stream) totalling bytes; the result is their SHA-256.",
		ArgumentsSchema: object(map[string]any{
			"bytes": integer(0, 0, nil),
			"chunk": integer(1, maxMediaChunk, ptr(defaultMediaChunk)),
		}, "bytes"),
		InputSchema:  anyObject(),
		OutputSchema: anyObject(),
		ResultSchema: object(map[string]any{
			"sha256": map[string]any{"type": "string", "pattern": "^[a-f0-9]{64}$"},
		}, "sha256"),
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			a := mediaArgs{Chunk: defaultMediaChunk}
			if err := s.Arguments().Decode(&a); err != nil || a.Bytes < 0 || a.Chunk < 1 || a.Chunk > maxMediaChunk {
				return nil, &frame.Error{Code: frame.CodeProviderError, Message: "arguments: bytes must be >= 0, chunk in [1, 16777216]"}
			}
			h := sha256.New()
			// The pattern repeats every mediaPeriod bytes, so every chunk is
			// a window of one precomputed buffer: no per-byte work.
			n0 := min(a.Chunk, max(a.Bytes, 1))
			pattern := make([]byte, n0+mediaPeriod)
			for i := range pattern {
				pattern[i] = MediaByte(int64(i))
			}
			for off := int64(0); off < a.Bytes; {
				n := min(a.Chunk, a.Bytes-off)
				start := off % mediaPeriod
				b := pattern[start : start+n]
				h.Write(b)
				// Send does not modify the bytes it sends, so the pattern is shared.
				if err := s.Send(nil, &frame.InlineMedia{Data: b, MediaType: MediaType}); err != nil {
					return nil, err
				}
				off += n
			}
			return frame.MustPayload(map[string]any{"sha256": hex.EncodeToString(h.Sum(nil))}), nil
		},
	}
}

type sleepArgs struct {
	MS           int64 `json:"ms"`
	IgnoreCancel bool  `json:"ignore_cancel"`
}

func sleep(testTools bool) child.Tool {
	props := map[string]any{"ms": integer(0, 0, nil)}
	desc := "Sleeps ms milliseconds without reading its input; honours cancellation."
	if testTools {
		props["ignore_cancel"] = map[string]any{"type": "boolean", "default": false}
		desc = "Sleeps ms milliseconds without reading its input; honours cancellation unless ignore_cancel."
	}
	return child.Tool{
		ID:              "sleep",
		NoInput:         true,
		Description:     desc,
		ArgumentsSchema: object(props, "ms"),
		InputSchema:     anyObject(),
		OutputSchema:    anyObject(),
		ResultSchema:    object(map[string]any{"slept_ms": integer(0, 0, nil)}, "slept_ms"),
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			var a sleepArgs
			if err := s.Arguments().Decode(&a); err != nil || a.MS < 0 {
				return nil, &frame.Error{Code: frame.CodeProviderError, Message: "arguments: ms must be >= 0"}
			}
			if a.IgnoreCancel && !testTools {
				return nil, &frame.Error{Code: frame.CodeProviderError, Message: "arguments: ignore_cancel needs --test-tools"}
			}
			d := protocol.Millis(a.MS) // a huge ms sleeps for ever rather than not at all
			if a.IgnoreCancel {
				time.Sleep(d)
			} else {
				t := time.NewTimer(d)
				defer t.Stop()
				select {
				case <-t.C:
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
			}
			return frame.MustPayload(map[string]any{"slept_ms": a.MS}), nil
		},
	}
}

func fail() child.Tool {
	return child.Tool{
		ID:              "fail",
		NoInput:         true,
		Description:     "Ends with failed provider_error carrying message (sanitized).",
		ArgumentsSchema: object(map[string]any{"message": map[string]any{"type": "string"}}, "message"),
		InputSchema:     anyObject(),
		OutputSchema:    anyObject(),
		ResultSchema:    anyObject(),
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			var a struct {
				Message string `json:"message"`
			}
			if err := s.Arguments().Decode(&a); err != nil {
				return nil, &frame.Error{Code: frame.CodeProviderError, Message: "arguments: message must be a string"}
			}
			return nil, errors.New(a.Message)
		},
	}
}

// crashStatus is the exit status of the crash tool.
const crashStatus = 3

func crash(exit func(int)) child.Tool {
	return child.Tool{
		ID:              "crash",
		NoInput:         true,
		Description:     `Sends after chunks {"i": i}, then ends the process with status 3 (test only).`,
		ArgumentsSchema: object(map[string]any{"after": integer(0, 0, nil)}, "after"),
		InputSchema:     anyObject(),
		OutputSchema:    object(map[string]any{"i": integer(0, 0, nil)}, "i"),
		ResultSchema:    anyObject(),
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			var a struct {
				After int64 `json:"after"`
			}
			if err := s.Arguments().Decode(&a); err != nil || a.After < 0 {
				return nil, &frame.Error{Code: frame.CodeProviderError, Message: "arguments: after must be >= 0"}
			}
			for i := range a.After {
				if err := s.Send(frame.MustPayload(map[string]any{"i": i}), nil); err != nil {
					return nil, err
				}
			}
			s.Flush()
			exit(crashStatus)
			return nil, errors.New("crash: exit returned")
		},
	}
}

func relay(testTools bool) child.Tool {
	props := map[string]any{
		"tool":  map[string]any{"type": "string", "minLength": 1, "maxLength": 128},
		"args":  map[string]any{"type": "object"},
		"leave": map[string]any{"type": "boolean", "default": false},
		"input": map[string]any{"type": "array", "items": map[string]any{"type": "object"}, "maxItems": 8},
	}
	if testTools {
		props["feed"] = integer(0, 10_000_000, ptr(0))
		props["cancel_on_input"] = map[string]any{"type": "boolean", "default": false}
	}
	return child.Tool{
		ID:              "relay",
		Description:     "Calls tool through the host with args and streams its output back; completes with its result or ends with its failure.",
		ArgumentsSchema: object(props, "tool"),
		InputSchema:     anyObject(),
		OutputSchema:    anyObject(),
		ResultSchema:    anyObject(),
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			var a struct {
				Tool  string           `json:"tool"`
				Args  map[string]any   `json:"args"`
				Leave bool             `json:"leave"`
				Input []map[string]any `json:"input"`
				Feed  int64            `json:"feed"`
				// CancelOnInput: cancel the call when relay's own caller
				// sends a chunk or ends its input.
				CancelOnInput bool `json:"cancel_on_input"`
			}
			if err := s.Arguments().Decode(&a); err != nil || a.Tool == "" {
				return nil, &frame.Error{Code: frame.CodeProviderError, Message: "arguments: tool must be a tool id"}
			}
			var args frame.Payload
			if a.Args != nil {
				var err error
				if args, err = frame.PayloadOf(a.Args); err != nil {
					return nil, &frame.Error{Code: frame.CodeProviderError, Message: "arguments: args must be an object"}
				}
			}
			var opts []child.CallOption
			if a.Input != nil {
				// The call's whole input goes with its invoke, in one
				// write (child.WithInput).
				in := make([]frame.Payload, len(a.Input))
				for i, p := range a.Input {
					var err error
					if in[i], err = frame.PayloadOf(p); err != nil {
						return nil, &frame.Error{Code: frame.CodeProviderError, Message: "arguments: input must hold objects"}
					}
				}
				opts = append(opts, child.WithInput(in...))
			}
			c, err := s.Call(ctx, a.Tool, args, opts...)
			if err != nil {
				return nil, relayError(err)
			}
			if a.Input != nil && a.CancelOnInput {
				for range s.Input() {
					break
				}
				c.Cancel()
			}
			if a.Leave {
				return nil, nil // the SDK cancels the call left open, and waits for its end
			}
			if a.Input == nil && (a.Feed > 0 || a.CancelOnInput) {
				return feedCall(ctx, s, c, a.Feed, a.CancelOnInput)
			}
			if err := closeSend(c, a.Input != nil); err != nil {
				c.Cancel()
				return nil, relayError(err)
			}
			for f, err := range c.Frames() {
				if err != nil {
					c.Cancel()
					return nil, relayError(err)
				}
				if err := s.Send(f.Payload, f.Media); err != nil {
					c.Cancel()
					return nil, err
				}
			}
			res, err := c.Wait()
			if err != nil {
				return nil, relayError(err)
			}
			return res, nil
		},
	}
}

// closeSend closes c's input, unless it went with the invoke (sent).
func closeSend(c *child.Call, sent bool) error {
	if sent {
		return nil
	}
	return c.CloseSend()
}

// feedCall sends n chunks {"i": i} to the call c (they block while its
// callee does not take them) and then ends its input; with cancel, it
// leaves the input open and cancels c as soon as relay's caller sends a
// chunk or ends its input, whatever the sending is doing. relay then
// ends with c's end.
func feedCall(ctx context.Context, s *child.Stream, c *child.Call, n int64, cancel bool) (frame.Payload, error) {
	// fed holds the sender's one result.
	fed := make(chan error, 1)
	go func() { // stopped by the last chunk or by c's cancel; waited for below
		for i := range n {
			if err := c.Send(ctx, frame.MustPayload(map[string]any{"i": i}), nil); err != nil {
				fed <- err
				return
			}
		}
		if cancel {
			fed <- nil
			return
		}
		fed <- c.CloseSend()
	}()
	if cancel {
		for range s.Input() {
			break
		}
		c.Cancel()
	}
	ferr := <-fed
	res, err := c.Wait()
	switch {
	case err != nil:
		return nil, relayError(err)
	case ferr != nil:
		return nil, relayError(ferr)
	}
	return res, nil
}

// relayError is relay's failure for the error of its call: the callee's
// code and message, or provider_error with the refusal's text.
func relayError(err error) error {
	var ce *frame.Error
	if errors.As(err, &ce) {
		if ce.Code == frame.CodeCancelled {
			return &frame.Error{Code: frame.CodeProviderError, Message: "callee cancelled: " + ce.Message}
		}
		return &frame.Error{Code: ce.Code, Message: ce.Message}
	}
	return &frame.Error{Code: frame.CodeProviderError, Message: err.Error()}
}
