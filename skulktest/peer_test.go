package skulktest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/skulktest"
)

// The scripted host sends a caller chunk out of sequence: the provider
// refuses it with failed invalid_frame and ends the call; a control cancel
// for a running call reaches its handler.
func TestPeerGapAndCancel(t *testing.T) {
	var cancels = make(chan error, 1)
	opts := child.Options{Tools: []child.Tool{{
		ID: "wait",
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			<-ctx.Done()
			cancels <- context.Cause(ctx)
			return nil, ctx.Err()
		},
	}}}
	p := skulktest.ServePeer(t, opts)
	ctx := context.Background()
	hello, err := p.Handshake(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(hello.Tools) != 1 || hello.Tools[0].ID != "wait" {
		t.Fatalf("hello tools %v", hello.Tools)
	}
	s, err := p.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Invoke("g1", "wait", nil, 0); err != nil {
		t.Fatal(err)
	}
	s.Started("g1")
	s.Chunk("g1", 2, frame.MustPayload(map[string]any{}), nil) // sequence 1 skipped
	res, err := s.ReadCall("g1", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Terminal.Kind != frame.KindFailed || res.Terminal.Error.Code != frame.CodeInvalidFrame {
		t.Fatalf("terminal %v %v", res.Terminal.Kind, res.Terminal.Error)
	}
	if err := <-cancels; !errors.Is(err, child.ErrInvalidInput) {
		t.Fatalf("cause %v", err)
	}

	s2, err := p.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	s2.Invoke("c1", "wait", nil, 0)
	s2.Started("c1")
	if _, _, err := p.Ping(ctx, 7); err != nil { // the invoke has been read by now
		t.Fatal(err)
	}
	p.Cancel("c1", "test")
	res, err = s2.ReadCall("c1", time.Time{})
	if err != nil || res.Terminal.Kind != frame.KindCancelled {
		t.Fatalf("after cancel: %+v, %v", res, err)
	}
	if err := <-cancels; !errors.Is(err, child.ErrCancelRequested) {
		t.Fatalf("cause %v", err)
	}
	p.Drain(0)
	if _, err := p.WaitBye(ctx); err != nil {
		t.Fatal(err)
	}
	if code, err := p.Wait(ctx); err != nil || code != 0 {
		t.Fatalf("exit %d, %v", code, err)
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
		t.Fatal(err)
	}
	s, err := p.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Request("x1", skulktest.ScriptTool, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadCall("x1", time.Time{}); !errors.Is(err, skulktest.ErrProviderRules) {
		t.Fatalf("ReadCall: %v, want ErrProviderRules", err)
	}
	p.Close() // the host goes away: the child exits 0
	if code, err := p.Wait(ctx); err != nil || code != 0 {
		t.Fatalf("exit %d, %v\n%s", code, err, p.Output())
	}
}
