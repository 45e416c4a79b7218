// Package wordcount is a small Skulk provider: count_words counts the words
// of each text chunk the caller streams, wait waits. Its tests show how a
// provider is tested with package skulktest (docs/testing.md).
package wordcount

import (
	"context"
	"strings"
	"time"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
)

// Options returns the provider's options. onCancel, when not nil, is
// called with the cause each time a wait is cancelled.
func Options(onCancel func(cause error)) child.Options {
	return child.Options{Tools: []child.Tool{{
		ID:          "count_words",
		Description: "Counts the words of each text chunk that are at least min_length long.",
		ArgumentsSchema: map[string]any{"type": "object", "properties": map[string]any{
			"min_length": map[string]any{"type": "integer", "minimum": 1, "default": 1},
		}},
		InputSchema: map[string]any{"type": "object", "required": []any{"text"}, "properties": map[string]any{
			"text": map[string]any{"type": "string"},
		}},
		Handler: countWords,
	}, {
		ID:          "wait",
		Description: "Sends {\"waiting_ms\": ms}, then waits ms milliseconds, or until cancelled.",
		ArgumentsSchema: map[string]any{"type": "object", "required": []any{"ms"}, "properties": map[string]any{
			"ms": map[string]any{"type": "integer", "minimum": 0},
		}},
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			var args struct {
				MS int `json:"ms"`
			}
			if err := s.Arguments().Decode(&args); err != nil {
				return nil, err
			}
			// Say the wait began: a cancel the caller sends after this
			// chunk reaches a running handler (one sent earlier may end
			// the call before its handler runs).
			if err := s.Send(frame.MustPayload(map[string]any{"waiting_ms": args.MS}), nil); err != nil {
				return nil, err
			}
			select {
			case <-time.After(time.Duration(args.MS) * time.Millisecond):
				return frame.MustPayload(map[string]any{"waited_ms": args.MS}), nil
			case <-ctx.Done():
				if onCancel != nil {
					onCancel(context.Cause(ctx))
				}
				return nil, ctx.Err()
			}
		},
	}}}
}

func countWords(ctx context.Context, s *child.Stream) (frame.Payload, error) {
	var args struct {
		MinLength int `json:"min_length"`
	}
	if err := s.Arguments().Decode(&args); err != nil {
		return nil, err
	}
	total := 0
	for f, err := range s.Input() {
		if err != nil {
			return nil, err
		}
		var in struct {
			Text string `json:"text"`
		}
		if err := f.Payload.Decode(&in); err != nil {
			return nil, err
		}
		n := 0
		for _, w := range strings.Fields(in.Text) {
			if len(w) >= args.MinLength {
				n++
			}
		}
		total += n
		if err := s.Send(frame.MustPayload(map[string]any{"words": n}), nil); err != nil {
			return nil, err
		}
	}
	return frame.MustPayload(map[string]any{"total": total}), nil
}
