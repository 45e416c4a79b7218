package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
)

// skulkSystem is Skulk: the host package driving a child built on the
// child package (cmd/skulkchild, or the demo cmd/skulk-child).
type skulkSystem struct {
	sys string               // Skulk or SkulkDemo
	bin string               // the child binary
	dir string               // where the wire-level health child's directory goes
	env []string             // ExtraEnv of the children
	tp  trace.TracerProvider // the host's Config.TracerProvider; nil: tracing off
}

func (s *skulkSystem) name() string { return s.sys }

// skulkSession is a started host with one child.
type skulkSession struct {
	h        *host.Host
	hasReply bool // the child has the bench child's reply tool (unary calls)
}

func (s *skulkSystem) start(ctx context.Context) (*skulkSession, error) {
	h, err := host.Start(ctx, host.Config{Command: s.bin, ExtraEnv: s.env, TempDir: s.dir, TracerProvider: s.tp})
	if err != nil {
		return nil, fmt.Errorf("skulk: start: %w", err)
	}
	ss := &skulkSession{h: h}
	for _, t := range h.Tools() {
		ss.hasReply = ss.hasReply || t.ID == "reply"
	}
	return ss, nil
}

func (s *skulkSystem) open(ctx context.Context) (session, error) { return s.start(ctx) }

func (s *skulkSystem) coldStart(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	ss, err := s.start(ctx)
	if err != nil {
		return 0, err
	}
	defer ss.close()
	if err := ss.call(ctx); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

func (s *skulkSystem) crash(ctx context.Context) (time.Duration, error) {
	ss, err := s.start(ctx)
	if err != nil {
		return 0, err
	}
	defer ss.close()
	c, err := ss.h.Call(ctx, "echo", nil)
	if err != nil {
		return 0, err
	}
	defer c.Cancel()
	if err := c.Send(ctx, smallPayload, nil); err != nil {
		return 0, err
	}
	// started, then the echoed chunk: the handler is running and waits
	// for more input.
	for _, want := range []frame.Kind{frame.KindStarted, frame.KindChunk} {
		f, err := c.Recv(ctx)
		if err != nil {
			return 0, err
		}
		if f.Kind != want {
			return 0, fmt.Errorf("skulk: crash: got a %s frame, want %s", f.Kind, want)
		}
	}
	kids := ss.h.Children()
	if len(kids) != 1 || kids[0].PID <= 0 {
		return 0, errors.New("skulk: crash: no child pid")
	}
	t0 := time.Now()
	if err := syscall.Kill(kids[0].PID, syscall.SIGKILL); err != nil {
		return 0, err
	}
	f, err := c.Recv(ctx)
	d := time.Since(t0)
	if err == nil && !(f.Kind == frame.KindFailed && f.Synthetic) {
		return 0, fmt.Errorf("skulk: crash: got a %s frame after SIGKILL, want a synthetic failed", f.Kind)
	}
	return d, nil
}

func (s *skulkSystem) healthUnderBackpressure(ctx context.Context, streams, pings int) ([]time.Duration, error) {
	return healthWire(ctx, s.bin, s.dir, streams, pings)
}

// smallPayload is a 64-byte payload: {"text": 56 characters}.
var smallPayload = frame.MustPayload(map[string]any{"text": strings.Repeat("x", payloadSize-8)})

// countPad is count's size argument that makes its chunks {"i": i, "pad":
// 50 characters} 64 bytes of msgpack (60 while i < 128).
const countPad = payloadSize - 14

func (ss *skulkSession) smallStream(ctx context.Context, n int) error {
	return ss.smallStreamWith(ctx, n)
}

// smallStreamWith is smallStream with call options.
func (ss *skulkSession) smallStreamWith(ctx context.Context, n int, opts ...host.CallOption) error {
	c, err := ss.h.Call(ctx, "count", frame.MustPayload(map[string]any{"n": n, "size": countPad}), opts...)
	if err != nil {
		return err
	}
	got, _, err := drain(ctx, c)
	if err != nil {
		return err
	}
	if got != n {
		return fmt.Errorf("skulk: stream: got %d chunks, want %d", got, n)
	}
	return nil
}

func (ss *skulkSession) media(ctx context.Context, n, chunk int) error {
	c, err := ss.h.Call(ctx, "media", frame.MustPayload(map[string]any{"bytes": n * chunk, "chunk": chunk}))
	if err != nil {
		return err
	}
	_, bytes, err := drain(ctx, c)
	if err != nil {
		return err
	}
	if bytes != int64(n)*int64(chunk) {
		return fmt.Errorf("skulk: media: got %d bytes, want %d", bytes, int64(n)*int64(chunk))
	}
	return nil
}

// drain reads a call to its end and counts its chunks and media bytes; a
// terminal other than completed is an error.
func drain(ctx context.Context, c *host.Call) (chunks int, bytes int64, err error) {
	for {
		f, err := c.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return chunks, bytes, nil
		}
		if err != nil {
			c.Cancel()
			return chunks, bytes, err
		}
		switch f.Kind {
		case frame.KindChunk:
			chunks++
			if m, ok := f.Media.(*frame.InlineMedia); ok {
				bytes += int64(len(m.Data))
				// Done with the bytes: the connection may read the next
				// attachment into them, as the raw baseline reuses its
				// buffer.
				c.Recycle(f)
			}
		case frame.KindFailed, frame.KindCancelled:
			return chunks, bytes, fmt.Errorf("skulk: call ended %s: %v", f.Kind, f.Error)
		}
	}
}

func (ss *skulkSession) echo(ctx context.Context, n int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c, err := ss.h.Call(ctx, "echo", nil)
	if err != nil {
		return err
	}
	werr := make(chan error, 1) // one value, sent by the sender below
	go func() {                 // ends after n sends and the half-close, or at the first error (cancel ends a blocked Send)
		for i := 0; i < n; i++ {
			if err := c.Send(ctx, smallPayload, nil); err != nil {
				werr <- err
				return
			}
		}
		werr <- c.CloseSend()
	}()
	got, _, rerr := drain(ctx, c)
	if rerr != nil {
		cancel()
	}
	if err := errors.Join(rerr, <-werr); err != nil {
		return err
	}
	if got != n {
		return fmt.Errorf("skulk: echo: got %d chunks, want %d", got, n)
	}
	return nil
}

// call is one small call: echo of one 64-byte chunk, sent with the invoke
// (host.WithInput: invoke, started, the chunk and completed in one write),
// read to its end.
func (ss *skulkSession) call(ctx context.Context) error {
	c, err := ss.h.Call(ctx, "echo", nil, host.WithInput(smallPayload))
	if err != nil {
		return err
	}
	return drainEcho(ctx, c)
}

// drainEcho reads a small call's echo to its end: one chunk, completed.
func drainEcho(ctx context.Context, c *host.Call) error {
	got, _, err := drain(ctx, c)
	if err != nil {
		return err
	}
	if got != 1 {
		return fmt.Errorf("skulk: call: got %d chunks, want 1", got)
	}
	return nil
}

// unary is the call in the shape of a unary RPC: the 64-byte payload goes
// as the invoke's arguments and comes back as the completed frame's value
// (invoke, started and completed in one write; completed and end back).
func (ss *skulkSession) unary(ctx context.Context) error {
	if !ss.hasReply {
		return notApplicable("the child has no unary tool")
	}
	c, err := ss.h.Call(ctx, "reply", smallPayload, host.WithInput())
	if err != nil {
		return err
	}
	p, err := c.Wait()
	if err != nil {
		return err
	}
	if len(p) != len(smallPayload) {
		return fmt.Errorf("skulk: unary: got %d bytes, want %d", len(p), len(smallPayload))
	}
	return nil
}

// callStreamed is call with its input streamed: Call, then Send and
// CloseSend, which is what a caller that learns its input only after the
// call started does. The frames on the wire are the same.
func (ss *skulkSession) callStreamed(ctx context.Context) error {
	c, err := ss.h.Call(ctx, "echo", nil)
	if err != nil {
		return err
	}
	if err := c.Send(ctx, smallPayload, nil); err != nil {
		c.Cancel()
		return err
	}
	if err := c.CloseSend(); err != nil {
		c.Cancel()
		return err
	}
	return drainEcho(ctx, c)
}

func (ss *skulkSession) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return ss.h.Close(ctx)
}
