package skulktest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/skulktest"
)

// The body of a provider's test: its tools served in the test's process
// behind a real host. In your package it is a TestXxx(t *testing.T), and
// the package's TestMain calls skulktest.Main(m).
func testUpper(t testing.TB) {
	opts := child.Options{Tools: []child.Tool{{
		ID: "upper",
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			for f, err := range s.Input() {
				if err != nil {
					return nil, err
				}
				text, _ := f.Payload.Text()
				if err := s.Send(frame.MustPayload(map[string]any{"text": strings.ToUpper(text)}), nil); err != nil {
					return nil, err
				}
			}
			return nil, nil
		},
	}}}
	h := skulktest.StartProvider(t, opts, host.Config{})
	c, err := h.Call(context.Background(), "upper", nil, host.WithInput(frame.MustPayload(map[string]any{"text": "hello"})))
	require.NoError(t, err)
	o := skulktest.Collect(t, c)
	require.NoError(t, o.Err)
	for _, p := range o.ChunkPayloads() {
		skulktest.JSONEqual(t, p, `{"text": "HELLO"}`)
		fmt.Println(p)
	}
}

// Testing a provider: StartProvider serves child.Options behind a real
// host on real sockets; Collect reads a call to its end.
func Example_provider() {
	runExample(testUpper)
	// Output: {"text":"HELLO"}
}

// The body of a test of host code: a child that crashes after one chunk
// of the first call. In your package it is a TestXxx(t *testing.T).
func testCrash(t testing.TB) {
	h := skulktest.StartHost(t, skulktest.Child(t, skulktest.CrashAfter(1)))
	c, err := h.Call(context.Background(), skulktest.ScriptTool, nil)
	require.NoError(t, err)
	o := skulktest.Collect(t, c)
	var ce *frame.Error
	if errors.As(o.Err, &ce) {
		fmt.Println(len(o.ChunkPayloads()), "chunk, then", ce.Code, "synthetic:", ce.Synthetic)
	}
	info := skulktest.WaitRestart(t, h, 0, 1)
	fmt.Println("restarts:", info.Restarts, "child died:", errors.Is(info.LastCause, host.ErrChildDied))

	c, err = h.Call(context.Background(), skulktest.ScriptTool, nil, host.WithInput())
	require.NoError(t, err)
	fmt.Println("next call:", skulktest.Collect(t, c).Err)
}

// Testing host code: Child scripts a misbehaving child, one fault per call.
func Example_host() {
	runExample(testCrash)
	// Output:
	// 1 chunk, then unreachable synthetic: true
	// restarts: 1 child died: true
	// next call: <nil>
}

// The body of a wire-level test: a scripted host sends a caller chunk out
// of sequence and sees the provider refuse it.
func testGap(t testing.TB) {
	p := skulktest.ServePeer(t, child.Options{Tools: []child.Tool{{
		ID:      "sink",
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) { <-ctx.Done(); return nil, ctx.Err() },
	}}})
	ctx := context.Background()
	if _, err := p.Handshake(ctx, nil); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	s, err := p.Dial(ctx)
	require.NoError(t, err)
	defer s.Close()
	s.Invoke("call-1", "sink", nil, time.Minute)
	s.Started("call-1")
	s.Chunk("call-1", 2, frame.MustPayload(map[string]any{}), nil) // 1 skipped
	res, err := s.ReadCall("call-1", time.Time{})
	require.NoError(t, err)
	fmt.Println(res.Terminal.Kind, res.Terminal.Error.Code, "end:", res.End)
}

// Testing a provider at the wire level: ServePeer (or ExecPeer for a
// binary) gives a host that writes exactly what the test says.
func ExamplePeer() {
	runExample(testGap)
	// Output: failed invalid_frame end: true
}
