package skulktest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/skulktest"
	"github.com/skulkrt/skulk/wire"
)

// The scripted host sends a caller chunk out of sequence: the provider
// refuses it with failed invalid_frame and ends the call; a control cancel
// for a running call reaches its handler.
func TestPeerGapAndCancel(t *testing.T) {
	var cancels = make(chan error, 1)
	var running = make(chan struct{}, 1)
	opts := child.Options{Tools: []child.Tool{{
		ID: "wait",
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			running <- struct{}{}
			<-ctx.Done()
			cancels <- context.Cause(ctx)
			return nil, ctx.Err()
		},
	}}}
	p := skulktest.ServePeer(t, opts)
	ctx := context.Background()
	hello, err := p.Handshake(ctx, nil)
	require.NoError(t, err)
	require.Falsef(t, len(hello.Tools) != 1 || hello.Tools[0].ID != "wait", "hello tools %v", hello.Tools)
	s, err := p.Dial(ctx)
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Invoke("g1", "wait", nil, 0))
	s.Started("g1")
	s.Chunk("g1", 2, frame.MustPayload(map[string]any{}), nil) // sequence 1 skipped
	res, err := s.ReadCall("g1", time.Time{})
	require.NoError(t, err)
	require.Falsef(t, res.Terminal.Kind != frame.KindFailed || res.Terminal.Error.Code != frame.CodeInvalidFrame, "terminal %v %v", res.Terminal.Kind, res.Terminal.Error)
	<-running // the g1 handler ran
	if err := <-cancels; !errors.Is(err, child.ErrInvalidInput) {
		require.FailNow(t, fmt.Sprintf("cause %v", err))
	}

	s2, err := p.Dial(ctx)
	require.NoError(t, err)
	defer s2.Close()
	s2.Invoke("c1", "wait", nil, 0)
	s2.Started("c1")
	// The invoke travels on the stream connection and the cancel on the
	// control one: without this wait the cancel may arrive first, and the
	// child then ends the call without running its handler.
	<-running
	p.Cancel("c1", "test")
	res, err = s2.ReadCall("c1", time.Time{})
	require.Falsef(t, err != nil || res.Terminal.Kind != frame.KindCancelled, "after cancel: %+v, %v", res, err)
	if err := <-cancels; !errors.Is(err, child.ErrCancelRequested) {
		require.FailNow(t, fmt.Sprintf("cause %v", err))
	}
	p.Drain(0)
	if _, err := p.WaitBye(ctx); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	if code, err := p.Wait(ctx); err != nil || code != 0 {
		require.FailNow(t, fmt.Sprintf("exit %d, %v", code, err))
	}
}

// ExecPeer starts a binary as a host does; here the scripted child, whose
// fault is a frame of another call, which ReadCall reports as a broken
// rule.
func TestExecPeer(t *testing.T) {
	cfg := skulktest.Child(t, skulktest.OtherCall())
	p := skulktest.ExecPeer(t, cfg.Command, cfg.Args, cfg.ExtraEnv...)
	ctx := context.Background()
	if _, err := p.Handshake(ctx, nil); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	s, err := p.Dial(ctx)
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Request("x1", skulktest.ScriptTool, nil))
	if _, err := s.ReadCall("x1", time.Time{}); !errors.Is(err, skulktest.ErrProviderRules) {
		require.FailNow(t, fmt.Sprintf("ReadCall: %v, want ErrProviderRules", err))
	}
	p.Close() // the host goes away: the child exits 0
	if code, err := p.Wait(ctx); err != nil || code != 0 {
		require.FailNow(t, fmt.Sprintf("exit %d, %v\n%s", code, err, p.Output()))
	}
}

// A provider whose handler never reads its input stops reading the stream
// once its ingress queue is full: the scripted host's write then fails at
// its deadline, with an error matching os.ErrDeadlineExceeded, instead of
// blocking the test.
func TestStreamWriteDeadline(t *testing.T) {
	release := make(chan struct{})
	opts := child.Options{Tools: []child.Tool{{
		ID: "deaf",
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			select { // reads no input
			case <-ctx.Done():
			case <-release:
			}
			return nil, ctx.Err()
		},
	}}}
	p := skulktest.ServePeer(t, opts)
	defer close(release)
	ctx := context.Background()
	if _, err := p.Handshake(ctx, nil); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	s, err := p.Dial(ctx)
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Invoke("d1", "deaf", nil, 0))
	require.NoError(t, s.Started("d1"))
	payload := frame.MustPayload(map[string]any{"fill": strings.Repeat("x", 32<<10)})
	const wait = 300 * time.Millisecond
	// 8 chunks fill the ingress queue; the socket's buffers hold a few MiB
	// at most: 4000 chunks of 32 KiB are far more than both.
	for seq := uint64(1); seq <= 4000; seq++ {
		f, err := frame.NewChunk("d1", frame.CallerToProvider, seq, payload, nil)
		require.NoError(t, err)
		b, err := packetio.Encode(&wire.Frame{Frame: f}, wire.Limits{})
		require.NoError(t, err)
		start := time.Now()
		err = s.WriteRawBy(b, start.Add(wait))
		if err == nil {
			continue
		}
		require.ErrorIsf(t, err, os.ErrDeadlineExceeded, "chunk %d: %v, want os.ErrDeadlineExceeded", seq, err)
		if took := time.Since(start); took > skulktest.Timeout {
			require.FailNow(t, fmt.Sprintf("chunk %d: the write gave up after %v for a deadline of %v", seq, took, wait))
		}
		return
	}
	require.FailNow(t, "the child took 4000 chunks of 32 KiB without reading them")
}
