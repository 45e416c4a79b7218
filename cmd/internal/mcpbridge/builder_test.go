package mcpbridge

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
)

// A chunk whose text would take the result over TextMax loses its text,
// not its media: the media still fits the inline budget and is kept.
func TestTextOverMaxKeepsMedia(t *testing.T) {
	t.Parallel()
	b := &resultBuilder{s: &Server{opts: ServerOptions{TextMax: 8, InlineMax: 1 << 10}}}
	payload := frame.MustPayload(map[string]any{"text": strings.Repeat("x", 64)})
	img := &frame.InlineMedia{Data: []byte{1, 2, 3}, MediaType: "image/png"}
	b.add(t.Context(), frame.Frame{Kind: frame.KindChunk, Sequence: 1, Payload: payload, Media: img})
	assert.EqualValuesf(t, 1, b.dropped, "dropped %d, want 1 (the chunk's text)", b.dropped)
	require.EqualValuesf(t, 1, len(b.content), "content %d items, want the image alone", len(b.content))
	if ic, ok := b.content[0].(*mcp.ImageContent); !ok || string(ic.Data) != "\x01\x02\x03" {
		require.FailNow(t, fmt.Sprintf("content %T, want the chunk's image", b.content[0]))
	}
}

// Wait returns at once with no handler running, waits for a running one,
// and gives up with ctx.
func TestServerWaitForHandlers(t *testing.T) {
	t.Parallel()
	s := &Server{}
	require.NoError(t, s.Wait(t.Context()), "idle")
	s.enter()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := s.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		require.FailNow(t, fmt.Sprintf("running: %v, want context.DeadlineExceeded", err))
	}
	waited := make(chan error, 1)
	go func() { waited <- s.Wait(t.Context()) }() // stopped by leave below
	s.leave()
	require.NoError(t, <-waited, "after leave")
}

// The content of a result, as docs/mcp.md states it: one text content per
// run of consecutive text chunks, the texts concatenated; one per run of
// other payloads (a text with other keys beside it among them, so that
// they are kept), a compact JSON object per line; media ends a run and is
// content of its own: audio/* (the type matched without case or
// parameters) as audio content with what MCP has no field for in its
// _meta, a blob as a skulk-blob: link.
func TestResultContentRuns(t *testing.T) {
	t.Parallel()
	b := &resultBuilder{s: &Server{opts: ServerOptions{TextMax: 1 << 10, InlineMax: 1 << 10}}}
	ts, dur := 1.5, 0.02
	audio := &frame.InlineMedia{Data: []byte{9, 8, 7}, MediaType: "Audio/Ogg; codecs=opus", Codec: "opus",
		SampleRate: 48000, Channels: 2, TimestampSeconds: &ts, DurationSeconds: &dur}
	blob := &frame.BlobMedia{BlobID: "b1", MediaType: "video/mp4", SizeBytes: 1 << 20, SHA256: strings.Repeat("ab", 32)}
	text := func(s string) frame.Payload { return frame.MustPayload(map[string]any{"text": s}) }
	for i, f := range []frame.Frame{
		{Payload: text("one ")}, {Payload: text("two")},
		{Payload: frame.MustPayload(map[string]any{"i": 1})}, {Payload: frame.MustPayload(map[string]any{"text": "x", "lang": "en"})},
		{Payload: text("three")},
		{Media: audio},
		{Media: blob},
	} {
		f.Kind, f.Sequence = frame.KindChunk, uint64(i+1)
		b.add(t.Context(), f)
	}
	require.EqualValuesf(t, 5, len(b.content), "content of %d items, want 5", len(b.content))
	for i, want := range []string{"one two", "{\"i\":1}\n{\"lang\":\"en\",\"text\":\"x\"}\n", "three"} {
		if tc, ok := b.content[i].(*mcp.TextContent); !ok || tc.Text != want {
			assert.Fail(t, fmt.Sprintf("content %d: %#v, want the text %q", i, b.content[i], want))
		}
	}
	// The progress message of such a chunk keeps its keys too.
	if got := chunkSummary(frame.Frame{Payload: frame.MustPayload(map[string]any{"text": "x", "lang": "en"})}); got != `{"lang":"en","text":"x"}` {
		assert.Fail(t, fmt.Sprintf("progress message of a text with other keys: %q", got))
	}
	ac, ok := b.content[3].(*mcp.AudioContent)
	if !ok {
		require.FailNow(t, fmt.Sprintf("content 3: %T, want audio content", b.content[3]))
	}
	wantMeta := mcp.Meta{MetaSequence: uint64(6), "skulk/codec": "opus", "skulk/sample_rate": int64(48000),
		"skulk/channels": int64(2), "skulk/timestamp_seconds": 1.5, "skulk/duration_seconds": 0.02}
	assert.Falsef(t, string(ac.Data) != "\x09\x08\x07" || ac.MIMEType != audio.MediaType || !reflect.DeepEqual(ac.Meta, wantMeta), "audio content %q %q %v, want the media's bytes and type and _meta %v", ac.Data, ac.MIMEType, ac.Meta, wantMeta)
	rl, ok := b.content[4].(*mcp.ResourceLink)
	if !ok || rl.URI != "skulk-blob:b1" || rl.MIMEType != "video/mp4" || rl.Size == nil || *rl.Size != 1<<20 || rl.Meta["skulk/sha256"] != blob.SHA256 {
		assert.Fail(t, fmt.Sprintf("blob: %#v, want a skulk-blob:b1 link of its type, size and digest", b.content[4]))
	}
}
