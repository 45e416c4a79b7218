package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/recorder"
)

// Frames queued before the terminal always come out before it, even when
// the terminal was published first from the reader's point of view.
func TestRecvOrderTerminalLast(t *testing.T) {
	r, err := recorder.New(calllog.Options{}, nil)
	require.NoError(t, err)
	defer r.Close(context.Background())
	rec, err := r.Begin(context.Background(), recorder.CallInfo{ID: "x", Tool: "t"})
	require.NoError(t, err)
	c := &Call{id: "x", done: make(chan struct{}), rec: rec}
	c.out.init()
	started, _ := frame.NewStarted("x", frame.ProviderToCaller)
	c.out.put(started, true, nil, nil)
	for i := uint64(1); i <= 3; i++ {
		f, _ := frame.NewChunk("x", frame.ProviderToCaller, i, frame.MustPayload(map[string]any{"i": i}), nil)
		c.out.put(f, false, nil, nil)
	}
	term, _ := frame.NewFailed("x", frame.ProviderToCaller, 4, frame.CodeTimeout, "late")
	term.Synthetic = true
	c.finish(term, "tail")
	ctx := context.Background()
	for want := uint64(0); want <= 4; want++ {
		f, err := c.Recv(ctx)
		require.Falsef(t, err != nil || f.Sequence != want, "Recv: seq %d %v, want %d", f.Sequence, err, want)
	}
	if _, err := c.Recv(ctx); !errors.Is(err, io.EOF) {
		require.FailNow(t, fmt.Sprintf("after the terminal: %v", err))
	}
	_, err = c.Wait()
	var ce *frame.Error
	require.Falsef(t, !errors.As(err, &ce) || ce.Code != frame.CodeTimeout || !ce.Synthetic || Stderr(err) != "tail" || ce.Message != "late", "Wait: %#v", err)
	require.False(t, c.Send(ctx, nil, &frame.BlobMedia{}) != ErrSendClosed, "Send after the provider terminal")
}
