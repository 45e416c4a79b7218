package wire_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/wire"
	"github.com/skulkrt/skulk/wire/internal/protocol"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// -update rewrites the golden vectors in testdata/golden from goldenPackets,
// and the negative ones in testdata/negative from the reader's tables. Run
// it once after a deliberate change to the encoding, then review the diff.
var update = flag.Bool("update", false, "rewrite the vectors in testdata/golden and testdata/negative")

const goldenDir = "testdata/golden"

func f64(v float64) *float64 { return &v }

func mustFrame(f frame.Frame, err error) *wire.Frame {
	if err != nil {
		panic(err)
	}
	return &wire.Frame{f}
}

// goldenPackets lists one or more packets of every type, by vector name. The
// golden files hold their encodings; other implementations may use them as
// conformance vectors (docs/protocol.md describes them).
func goldenPackets() []struct {
	name string
	p    wire.Packet
} {
	sha := strings.Repeat("0123456789abcdef", 4)
	return []struct {
		name string
		p    wire.Packet
	}{
		{"hello", &wire.Hello{
			Protocol: []int64{1}, SDK: "skulk-go/0.1", PID: 4242, MaxStreams: 16,
			Limits: packetio.DefaultLimits(),
			Tools: []wire.Tool{
				{ID: "count", Version: "1", Description: "counts to n",
					ArgumentsSchema: map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}},
					OutputSchema:    map[string]any{"type": "object"}},
				{ID: "echo"},
			},
		}},
		{"startup", &wire.Startup{Protocol: 1, ChildID: "child-1", Limits: packetio.DefaultLimits(), HealthIntervalMS: 1000,
			CancelGraceMS: 1000, IngressQueue: protocol.IngressQueue}},
		{"startup_calls", &wire.Startup{Protocol: 1, ChildID: "child-1", Limits: packetio.DefaultLimits(), HealthIntervalMS: 1000,
			CancelGraceMS: 1000, IngressQueue: protocol.IngressQueue, Calls: &wire.Calls{
				Socket: "/tmp/skulk-1/c0.1/calls.sock",
				Tools: []wire.Tool{{ID: "lookup", Description: "looks a word up",
					ArgumentsSchema: map[string]any{"type": "object", "required": []any{"word"}, "properties": map[string]any{"word": map[string]any{"type": "string"}}}}},
				MaxDepth: 8, MaxInFlight: 16}}},
		{"startup_tools_updates", &wire.Startup{Protocol: 1, ChildID: "child-1", Limits: packetio.DefaultLimits(), HealthIntervalMS: 1000,
			CancelGraceMS: 1000, IngressQueue: protocol.IngressQueue, ToolsUpdates: true}},
		{"tools", &wire.Tools{Tools: []wire.Tool{
			{ID: "count", Version: "2", Description: "counts to n",
				ArgumentsSchema: map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}}},
			{ID: "echo"},
		}}},
		{"tools_empty", &wire.Tools{}},
		{"ping", &wire.Ping{Nonce: 1 << 40}},
		{"pong", &wire.Pong{Nonce: 1 << 40, Streams: 3, Stuck: 1}},
		{"cancel", &wire.Cancel{CallID: "call-1", Reason: "caller went away"}},
		{"cancel_no_reason", &wire.Cancel{CallID: "call-1"}},
		{"drain", &wire.Drain{GraceMS: 5000}},
		{"bye", &wire.Bye{Reason: "drained"}},
		{"bye_no_reason", &wire.Bye{}},
		{"invoke", &wire.Invoke{CallID: "call-1", ToolID: "count", Arguments: frame.MustPayload(map[string]any{"n": 3}),
			TimeoutMS: 30000, Trace: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
			Tree: "call-0", Parent: "call-0"}},
		{"invoke_nested", &wire.Invoke{CallID: "call-1.n1", ToolID: "lookup", Arguments: frame.MustPayload(map[string]any{"word": "fox"}),
			TimeoutMS: 2000, Parent: "call-1"}},
		{"invoke_nested_detached", &wire.Invoke{CallID: "call-1.n2", ToolID: "lookup", Arguments: frame.MustPayload(map[string]any{"word": "fox"}),
			Parent: "call-1", Detached: true}},
		{"invoke_step", &wire.Invoke{CallID: "h-2", ToolID: "count", Arguments: frame.MustPayload(map[string]any{"n": 1}),
			Tree: "h-1", Parent: "call-1.n1", Depth: 2}},
		{"invoke_minimal", &wire.Invoke{CallID: "call-2", ToolID: "echo", Arguments: frame.MustPayload(map[string]any{})}},
		{"frame_started", mustFrame(frame.NewStarted("call-1", frame.CallerToProvider))},
		{"frame_chunk_payload", mustFrame(frame.NewChunk("call-1", frame.ProviderToCaller, 1,
			frame.MustPayload(map[string]any{"i": 0, "text": "héllo", "ok": true, "tags": []any{"a", 1.5, nil}}), nil))},
		{"frame_chunk_inline", mustFrame(frame.NewChunk("call-1", frame.ProviderToCaller, 2,
			frame.MustPayload(map[string]any{"text": "with audio"}),
			&frame.InlineMedia{Data: []byte("RIFF\x00\x01\x02\x03raw pcm bytes \xff\xfe"), MediaType: "audio/pcm",
				Codec: "pcm_s16le", SampleRate: 16000, Channels: 1,
				TimestampSeconds: f64(1.5), DurationSeconds: f64(0.02)}))},
		{"frame_chunk_inline_empty", mustFrame(frame.NewChunk("call-1", frame.CallerToProvider, 1, nil,
			&frame.InlineMedia{Data: []byte{}, MediaType: "application/octet-stream"}))},
		{"frame_chunk_blob", mustFrame(frame.NewChunk("call-1", frame.ProviderToCaller, 3, nil,
			&frame.BlobMedia{BlobID: "blob-7", SizeBytes: 1 << 33, SHA256: sha, MediaType: "video/mp4"}))},
		{"frame_completed", mustFrame(frame.NewCompleted("call-1", frame.ProviderToCaller, 4,
			frame.MustPayload(map[string]any{"total": 3})))},
		{"frame_completed_empty", mustFrame(frame.NewCompleted("call-1", frame.CallerToProvider, 2, nil))},
		{"frame_failed", mustFrame(frame.NewFailed("call-1", frame.ProviderToCaller, 4, frame.CodeProviderError, "boom"))},
		{"frame_cancelled", mustFrame(frame.NewCancelled("call-1", frame.ProviderToCaller, 2, "cancelled by caller"))},
		{"frame_cancelled_bare", mustFrame(frame.NewCancelled("call-1", frame.CallerToProvider, 5, ""))},
		{"end", &wire.End{CallID: "call-1"}},
	}
}

// describe renders an encoded packet for people and for implementers in other
// languages: the two lengths, the header as JSON, and the attachment in hex.
func describe(b []byte) string {
	h := int(uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]))
	a := int(uint32(b[4])<<24 | uint32(b[5])<<16 | uint32(b[6])<<8 | uint32(b[7]))
	dec := msgpack.NewDecoder(bytes.NewReader(b[protocol.PrefixLen : protocol.PrefixLen+h]))
	dec.UseLooseInterfaceDecoding(true)
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		panic(err)
	}
	js, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		panic(err)
	}
	var s strings.Builder
	fmt.Fprintf(&s, "header length H = %d\nattachment length A = %d\nheader (msgpack, shown as JSON; key order on the wire is the encoder's):\n%s\n", h, a, js)
	fmt.Fprintf(&s, "header hex:\n%s", hex.Dump(b[protocol.PrefixLen:protocol.PrefixLen+h]))
	if a > 0 {
		fmt.Fprintf(&s, "attachment hex:\n%s", hex.Dump(b[protocol.PrefixLen+h:]))
	}
	return s.String()
}

func TestGolden(t *testing.T) {
	for _, g := range goldenPackets() {
		t.Run(g.name, func(t *testing.T) {
			bin := filepath.Join(goldenDir, g.name+".bin")
			txt := filepath.Join(goldenDir, g.name+".txt")
			enc, err := packetio.Encode(g.p, wire.Limits{})
			require.NoError(t, err)
			if *update {
				require.NoError(t, os.MkdirAll(goldenDir, 0o755))
				require.NoError(t, os.WriteFile(bin, enc, 0o644))
				require.NoError(t, os.WriteFile(txt, []byte(describe(enc)), 0o644))
			}
			want, err := os.ReadFile(bin)
			require.NoError(t, err, "run go test ./wire -run TestGolden -update once")
			require.Equal(t, hex.EncodeToString(want), hex.EncodeToString(enc), "encoding differs from the golden vector")
			desc, err := os.ReadFile(txt)
			require.NoError(t, err)
			require.Equal(t, string(desc), describe(want))

			got, err := wire.Decode(want, wire.Limits{})
			require.NoError(t, err)
			require.Equal(t, g.p, got)
			re, err := packetio.Encode(got, wire.Limits{})
			require.NoError(t, err)
			require.Equal(t, want, re, "decode then encode must give the same bytes")
		})
	}
}

// TestGoldenCoversEveryType makes sure no packet type lacks a vector.
func TestGoldenCoversEveryType(t *testing.T) {
	seen := map[string]bool{} // by wire name: packetio's types and the codec's agree on them
	inline := false
	for _, g := range goldenPackets() {
		seen[packetio.TypeOf(g.p).String()] = true
		if f, ok := g.p.(*wire.Frame); ok {
			if m, ok := f.Media.(*frame.InlineMedia); ok && len(m.Data) > 0 {
				inline = true
			}
		}
	}
	for ty := protocol.TypeHello; ty <= protocol.TypeTools; ty++ {
		require.True(t, seen[ty.String()], "no golden vector for %s", ty)
	}
	require.True(t, inline, "no golden inline-media frame with an attachment")
}

// goldenStream returns every golden vector back to back, as one connection
// would carry them, and the packets they hold.
func goldenStream(t *testing.T) ([]byte, []wire.Packet) {
	t.Helper()
	var all []byte
	var ps []wire.Packet
	for _, g := range goldenPackets() {
		b, err := os.ReadFile(filepath.Join(goldenDir, g.name+".bin"))
		require.NoError(t, err)
		all = append(all, b...)
		ps = append(ps, g.p)
	}
	return all, ps
}
