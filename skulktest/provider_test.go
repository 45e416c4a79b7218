package skulktest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/skulktest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shout upper-cases each chunk; wait blocks until cancelled and counts the
// cancellations it saw.
func testTools(cancels *atomic.Int32) child.Options {
	return child.Options{Tools: []child.Tool{{
		ID:              "shout",
		InputSchema:     map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}},
		ArgumentsSchema: map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}},
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			n := 0
			for f, err := range s.Input() {
				if err != nil {
					return nil, err
				}
				var in struct{ Text string }
				f.Payload.Decode(&in)
				if err := s.Send(frame.MustPayload(map[string]any{"text": strings.ToUpper(in.Text)}), nil); err != nil {
					return nil, err
				}
				n++
			}
			return frame.MustPayload(map[string]any{"chunks": n}), nil
		},
	}, {
		ID: "wait",
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			<-ctx.Done()
			cancels.Add(1)
			return nil, context.Cause(ctx)
		},
	}}}
}

func TestStartProviderCalls(t *testing.T) {
	var cancels atomic.Int32
	h := skulktest.StartProvider(t, testTools(&cancels), host.Config{})
	ctx := context.Background()

	c, err := h.Call(ctx, "shout", nil, host.WithInput(frame.MustPayload(map[string]any{"text": "hi"})))
	require.NoError(t, err)
	o := skulktest.Collect(t, c)
	require.Falsef(t, o.Err != nil || len(o.ChunkPayloads()) != 1, "outcome %+v", o)
	skulktest.JSONEqual(t, o.ChunkPayloads()[0], `{"text": "HI"}`)
	skulktest.JSONEqual(t, o.Result, `{"chunks": 1}`)

	_, err = h.Call(ctx, "shout", frame.MustPayload(map[string]any{"n": "many"}))
	var se *host.SchemaError
	require.ErrorAsf(t, err, &se, "Call: %v, want a SchemaError for /n", err)
	require.Equalf(t, "/n", se.Field, "Call: %v, want a SchemaError for /n", err)

	dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	c, err = h.Call(dctx, "wait", nil)
	require.NoError(t, err)
	if ce := skulktest.Collect(t, c).CallError(); ce == nil || ce.Code != frame.CodeTimeout || ce.Synthetic {
		require.FailNow(t, fmt.Sprintf("deadline: %v, want the child's timeout", ce))
	}

	c, err = h.Call(ctx, "wait", nil)
	require.NoError(t, err)
	time.AfterFunc(50*time.Millisecond, c.Cancel)
	if ce := skulktest.Collect(t, c).CallError(); ce == nil || ce.Code != frame.CodeCancelled {
		require.FailNow(t, fmt.Sprintf("cancel: %v", ce))
	}
	if n := cancels.Load(); n != 2 {
		require.FailNow(t, fmt.Sprintf("the handler saw %d cancellations, want 2", n))
	}
}

// A relay killed by a signal is a child that died: the host restarts it,
// and the new relay serves the same opts.
func TestStartProviderRestart(t *testing.T) {
	var cancels atomic.Int32
	h := skulktest.StartProvider(t, testTools(&cancels), host.Config{
		HealthInterval: 100 * time.Millisecond, HealthTimeout: 2 * time.Second,
		Restart: host.RestartPolicy{BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond},
	})
	c, err := h.Call(context.Background(), "wait", nil)
	require.NoError(t, err)
	syscall.Kill(h.Children()[0].PID, syscall.SIGKILL)
	if ce := skulktest.Collect(t, c).CallError(); ce == nil || ce.Code != frame.CodeUnreachable || !ce.Synthetic {
		require.FailNow(t, fmt.Sprintf("outcome %v, want a synthetic unreachable", ce))
	}
	info := skulktest.WaitRestart(t, h, 0, 1)
	require.ErrorIsf(t, info.LastCause, host.ErrChildDied, "last cause %v", info.LastCause)
	c, err = h.Call(context.Background(), "shout", nil, host.WithInput(frame.MustPayload(map[string]any{"text": "again"})))
	require.NoError(t, err)
	if o := skulktest.Collect(t, c); o.Err != nil {
		require.FailNow(t, fmt.Sprintf("after the restart: %v", o.Err))
	}
}

func TestStartProviderPool(t *testing.T) {
	var cancels atomic.Int32
	h := skulktest.StartProvider(t, testTools(&cancels), host.Config{PoolSize: 3})
	if n := len(h.Children()); n != 3 {
		require.FailNow(t, fmt.Sprintf("%d children", n))
	}
	for range 6 {
		c, err := h.Call(context.Background(), "shout", nil)
		require.NoError(t, err)
		c.CloseSend()
		if o := skulktest.Collect(t, c); o.Err != nil {
			require.FailNow(t, fmt.Sprint(o.Err))
		}
	}
}

// TestChildQuickExit checks the environment of skulktest's children:
// built with -race, StartProvider's relay and a Child get
// GORACE=atexit_sleep_ms=0 (a second saved at every exit), unless the
// Config says what GORACE is; without -race they get no GORACE. The
// Config's own GORACE says atexit_sleep_ms=0 too, so that its relay does
// not pause a second at exit either; halt_on_error=1 tells it from
// skulktest's value in the relay's environment.
func TestChildQuickExit(t *testing.T) {
	env := func(t *testing.T, h *host.Host) []string {
		t.Helper()
		pid := h.Children()[0].PID
		require.NotZero(t, pid)
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		require.NoError(t, err)
		return strings.Split(string(b), "\x00")
	}
	want := []string(nil)
	if raceBuild {
		want = []string{"GORACE=atexit_sleep_ms=0"}
	}
	gorace := func(env []string) []string {
		var out []string
		for _, kv := range env {
			if strings.HasPrefix(kv, "GORACE=") {
				out = append(out, kv)
			}
		}
		return out
	}
	t.Run("provider", func(t *testing.T) {
		h := skulktest.StartProvider(t, testTools(new(atomic.Int32)), host.Config{})
		assert.Equal(t, want, gorace(env(t, h)))
	})
	t.Run("child", func(t *testing.T) {
		h := skulktest.StartHost(t, skulktest.Child(t))
		assert.Equal(t, want, gorace(env(t, h)))
	})
	t.Run("own", func(t *testing.T) {
		own := "GORACE=halt_on_error=1 atexit_sleep_ms=0"
		h := skulktest.StartProvider(t, testTools(new(atomic.Int32)), host.Config{ExtraEnv: []string{own}})
		assert.Equal(t, []string{own}, gorace(env(t, h)))
	})
}

// TestInputMedia: a tool that declares InputMedia gets only chunks that
// carry media: the host refuses one without (a *host.SchemaError naming
// input_media, nothing sent), and WithInput, which sends payloads only.
func TestInputMedia(t *testing.T) {
	opts := child.Options{Tools: []child.Tool{{
		ID:         "frames",
		InputMedia: true,
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			n := 0
			for f, err := range s.Input() {
				if err != nil {
					return nil, err
				}
				if f.Media == nil {
					return nil, errors.New("a chunk without media reached the handler")
				}
				n++
			}
			return frame.MustPayload(map[string]any{"chunks": n}), nil
		},
	}}}
	h := skulktest.StartProvider(t, opts, host.Config{})
	ctx := t.Context()
	require.True(t, h.Tools()[0].InputMedia, "the descriptor says so")

	c, err := h.Call(ctx, "frames", nil)
	require.NoError(t, err)
	err = c.Send(ctx, frame.MustPayload(map[string]any{"caption": "no picture"}), nil)
	var se *host.SchemaError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "input", se.Schema)
	assert.Equal(t, "input_media", se.Keyword)
	require.NoError(t, c.Send(ctx, frame.MustPayload(map[string]any{"caption": "a picture"}), &frame.InlineMedia{MediaType: "image/png", Data: []byte{0x89, 'P', 'N', 'G'}}))
	require.NoError(t, c.CloseSend())
	o := skulktest.Collect(t, c)
	require.NoError(t, o.Err)
	skulktest.JSONEqual(t, o.Result, `{"chunks": 1}`)

	_, err = h.Call(ctx, "frames", nil, host.WithInput(frame.MustPayload(map[string]any{})))
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "input_media", se.Keyword)
}
