package skulktest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/skulktest"
)

// echoWorks checks that a call of the scripted child's tool that takes no
// fault works: its chunk comes back and it completes.
func echoWorks(t *testing.T, h *host.Host) {
	t.Helper()
	c, err := h.Call(context.Background(), skulktest.ScriptTool, nil, host.WithInput(frame.MustPayload(map[string]any{"text": "x"})))
	require.NoError(t, err)
	o := skulktest.Collect(t, c)
	if o.Err != nil || len(o.ChunkPayloads()) != 1 {
		require.FailNow(t, fmt.Sprintf("the next call: %v, %d chunks", o.Err, len(o.ChunkPayloads())))
	}
	skulktest.JSONEqual(t, o.Result, `{"chunks": 1}`)
}

func call(t *testing.T, h *host.Host, ctx context.Context) *host.Call {
	t.Helper()
	c, err := h.Call(ctx, skulktest.ScriptTool, nil)
	require.NoError(t, err)
	return c
}

func wantSynthetic(t *testing.T, o *skulktest.Outcome, code frame.Code) *frame.Error {
	t.Helper()
	ce := o.CallError()
	require.Falsef(t, ce == nil || !ce.Synthetic || ce.Code != code, "outcome %v, want a synthetic %s", o.Err, code)
	return ce
}

func TestFaultCrashAfter(t *testing.T) {
	h := skulktest.StartHost(t, skulktest.Child(t, skulktest.CrashAfter(2)))
	o := skulktest.Collect(t, call(t, h, context.Background()))
	wantSynthetic(t, o, frame.CodeUnreachable)
	if len(o.ChunkPayloads()) != 2 {
		assert.Fail(t, fmt.Sprintf("%d chunks before the crash, want 2", len(o.ChunkPayloads())))
	}
	if !strings.Contains(host.Stderr(o.Err), "crashing on purpose after 2 frames") {
		assert.Fail(t, fmt.Sprintf("stderr tail %q", host.Stderr(o.Err)))
	}
	if info := skulktest.WaitRestart(t, h, 0, 1); !errors.Is(info.LastCause, host.ErrChildDied) {
		assert.Fail(t, fmt.Sprintf("last cause %v", info.LastCause))
	}
	echoWorks(t, h)
}

func TestFaultHang(t *testing.T) {
	h := skulktest.StartHost(t, skulktest.Child(t, skulktest.Hang(), skulktest.Hang()))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	wantSynthetic(t, skulktest.Collect(t, call(t, h, ctx)), frame.CodeTimeout)

	c := call(t, h, context.Background())
	c.Cancel()
	o := skulktest.Collect(t, c)
	if ce := o.CallError(); ce == nil || !ce.Synthetic || ce.Code != frame.CodeCancelled {
		require.FailNow(t, fmt.Sprintf("cancel: %v, want a synthetic cancelled", o.Err))
	}
	if r := h.Children()[0].Restarts; r != 0 {
		assert.Fail(t, fmt.Sprintf("%d restarts, want none", r))
	}
	echoWorks(t, h)
}

func TestFaultNoPongs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault skulktest.Fault
	}{{"StopPongs", skulktest.StopPongs()}, {"StopSelf", skulktest.StopSelf()}} {
		t.Run(tc.name, func(t *testing.T) {
			h := skulktest.StartHost(t, skulktest.Child(t, tc.fault))
			wantSynthetic(t, skulktest.Collect(t, call(t, h, context.Background())), frame.CodeUnreachable)
			if info := skulktest.WaitRestart(t, h, 0, 1); !errors.Is(info.LastCause, host.ErrUnhealthy) {
				assert.Fail(t, fmt.Sprintf("last cause %v", info.LastCause))
			}
			echoWorks(t, h)
		})
	}
}

func TestFaultBadOutput(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault skulktest.Fault
	}{
		{"Garbage", skulktest.Garbage()}, {"Oversize", skulktest.Oversize()},
		{"OtherCall", skulktest.OtherCall()}, {"Gap", skulktest.Gap()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := skulktest.StartHost(t, skulktest.Child(t, tc.fault))
			wantSynthetic(t, skulktest.Collect(t, call(t, h, context.Background())), frame.CodeInvalidFrame)
			echoWorks(t, h)
			if r := h.Children()[0].Restarts; r != 0 {
				assert.Fail(t, fmt.Sprintf("%d restarts, want none", r))
			}
		})
	}
}

func TestFaultDuplicateTerminal(t *testing.T) {
	h := skulktest.StartHost(t, skulktest.Child(t, skulktest.DuplicateTerminal()))
	o := skulktest.Collect(t, call(t, h, context.Background()))
	require.NoError(t, o.Err)
	skulktest.JSONEqual(t, o.Result, `{"first": true}`)
	echoWorks(t, h)
}

func TestFaultExitAtStart(t *testing.T) {
	t.Run("first start", func(t *testing.T) {
		cfg := skulktest.Child(t, skulktest.ExitAtStart(4))
		dir, err := os.MkdirTemp("", "skx")
		require.NoError(t, err)
		defer os.RemoveAll(dir)
		cfg.TempDir = dir
		ctx, cancel := context.WithTimeout(context.Background(), skulktest.Timeout)
		defer cancel()
		h, err := host.Start(ctx, cfg)
		if err == nil {
			h.Close(ctx)
		}
		require.ErrorIsf(t, err, host.ErrHandshake, "Start: %v, want host.ErrHandshake", err)
	})
	t.Run("restart", func(t *testing.T) {
		h := skulktest.StartHost(t, skulktest.Child(t, skulktest.CrashAfter(0), skulktest.ExitAtStart(4)))
		wantSynthetic(t, skulktest.Collect(t, call(t, h, context.Background())), frame.CodeUnreachable)
		skulktest.WaitRestart(t, h, 0, 2) // the failed start counts
		echoWorks(t, h)
	})
}
