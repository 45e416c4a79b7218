package wordcount_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/conformance/provider"
	"github.com/skulkrt/skulk/examples/wordcount"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/skulktest"
	"github.com/stretchr/testify/require"
)

// StartProvider runs the test binary as the relay child: TestMain hands
// over to skulktest.
func TestMain(m *testing.M) { skulktest.Main(m) }

func text(s string) frame.Payload { return frame.MustPayload(map[string]any{"text": s}) }

func TestCountWords(t *testing.T) {
	h := skulktest.StartProvider(t, wordcount.Options(nil), host.Config{})
	c, err := h.Call(t.Context(), "count_words", frame.MustPayload(map[string]any{"min_length": 3}),
		host.WithInput(text("a quick brown fox"), text("jumps")))
	require.NoError(t, err)
	o := skulktest.Collect(t, c)
	require.NoError(t, o.Err)
	require.Len(t, o.ChunkPayloads(), 2)
	skulktest.JSONEqual(t, o.ChunkPayloads()[0], `{"words": 3}`)
	skulktest.JSONEqual(t, o.Result, `{"total": 4}`)
}

func TestWait(t *testing.T) {
	h := skulktest.StartProvider(t, wordcount.Options(nil), host.Config{})
	c, err := h.Call(t.Context(), "wait", frame.MustPayload(map[string]any{"ms": 10}))
	require.NoError(t, err)
	skulktest.JSONEqual(t, skulktest.Collect(t, c).Result, `{"waited_ms": 10}`)
}

func TestSchemaRefusal(t *testing.T) {
	h := skulktest.StartProvider(t, wordcount.Options(nil), host.Config{})
	_, err := h.Call(t.Context(), "count_words", frame.MustPayload(map[string]any{"min_length": 0}))
	var se *host.SchemaError
	require.ErrorAs(t, err, &se)
	require.Equal(t, "arguments", se.Schema)
	require.Equal(t, "/min_length", se.Field)
	require.Equal(t, "minimum", se.Keyword)
}

func TestDeadline(t *testing.T) {
	causes := make(chan error, 1)
	h := skulktest.StartProvider(t, wordcount.Options(func(err error) { causes <- err }), host.Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	c, err := h.Call(ctx, "wait", frame.MustPayload(map[string]any{"ms": 60_000}))
	require.NoError(t, err)
	ce := skulktest.Collect(t, c).CallError()
	require.NotNil(t, ce, "the call completed; want the provider's timeout")
	require.Equal(t, frame.CodeTimeout, ce.Code)
	require.False(t, ce.Synthetic, "the timeout is the provider's, not one the host made up")
	require.ErrorIs(t, cause(t, causes), child.ErrTimeout, "what the handler saw")
}

// cause returns what the handler reported, failing the test after
// skulktest.Timeout.
func cause(t *testing.T, causes <-chan error) error {
	t.Helper()
	select {
	case err := <-causes:
		return err
	case <-time.After(skulktest.Timeout):
		require.FailNow(t, "the handler saw no cancellation")
		return nil
	}
}

func TestCancelReachesHandler(t *testing.T) {
	causes := make(chan error, 1)
	h := skulktest.StartProvider(t, wordcount.Options(func(err error) { causes <- err }), host.Config{})
	c, err := h.Call(t.Context(), "wait", frame.MustPayload(map[string]any{"ms": 60_000}))
	require.NoError(t, err)
	ctx, stop := context.WithTimeout(t.Context(), skulktest.Timeout)
	defer stop()
	for f, err := c.Recv(ctx); f.Kind != frame.KindChunk; f, err = c.Recv(ctx) {
		require.NoError(t, err) // the host's started, then {"waiting_ms"}: the handler runs
	}
	c.Cancel()
	ce := skulktest.Collect(t, c).CallError()
	require.NotNil(t, ce, "the call completed; want cancelled")
	require.Equal(t, frame.CodeCancelled, ce.Code)
	err = cause(t, causes)
	require.Truef(t, errors.Is(err, child.ErrCancelRequested) || errors.Is(err, child.ErrCallerCancelled), "the handler saw %v", err)
}

// The built binary under a real host: what users deploy.
func TestBinary(t *testing.T) {
	h := skulktest.StartHost(t, host.Config{Command: skulktest.Build(t, "./cmd/wordcount")})
	c, err := h.Call(t.Context(), "count_words", nil, host.WithInput(text("one two")))
	require.NoError(t, err)
	skulktest.JSONEqual(t, skulktest.Collect(t, c).Result, `{"total": 2}`)
}

// The conformance suite against the binary: the tests that make a call call
// count_words (arguments {}, no input: completed {"total": 0}); tests of
// the demo tools, which wordcount does not offer, are skipped.
func TestConformance(t *testing.T) {
	provider.Run(t, skulktest.Build(t, "./cmd/wordcount"), provider.Options{Tool: "count_words"})
}
