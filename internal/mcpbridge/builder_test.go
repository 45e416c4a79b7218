package mcpbridge

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skulkrt/skulk/frame"
)

// A chunk whose text would take the result over TextMax loses its text,
// not its media: the media still fits the inline budget and is kept.
func TestTextOverMaxKeepsMedia(t *testing.T) {
	b := &resultBuilder{s: &Server{opts: ServerOptions{TextMax: 8, InlineMax: 1 << 10}}}
	payload := frame.MustPayload(map[string]any{"text": strings.Repeat("x", 64)})
	img := &frame.InlineMedia{Data: []byte{1, 2, 3}, MediaType: "image/png"}
	b.add(t.Context(), frame.Frame{Kind: frame.KindChunk, Sequence: 1, Payload: payload, Media: img})
	if b.dropped != 1 {
		t.Errorf("dropped %d, want 1 (the chunk's text)", b.dropped)
	}
	if len(b.content) != 1 {
		t.Fatalf("content %d items, want the image alone", len(b.content))
	}
	if ic, ok := b.content[0].(*mcp.ImageContent); !ok || string(ic.Data) != "\x01\x02\x03" {
		t.Fatalf("content %T, want the chunk's image", b.content[0])
	}
}

// Wait returns at once with no handler running, waits for a running one,
// and gives up with ctx.
func TestServerWaitForHandlers(t *testing.T) {
	s := &Server{}
	if err := s.Wait(t.Context()); err != nil {
		t.Fatalf("idle: %v", err)
	}
	s.enter()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := s.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("running: %v, want context.DeadlineExceeded", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- s.Wait(t.Context()) }() // stopped by leave below
	s.leave()
	if err := <-waited; err != nil {
		t.Fatalf("after leave: %v", err)
	}
}
