package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"

	"github.com/skulkrt/skulk/bench/internal/gpbench"
	"github.com/skulkrt/skulk/bench/internal/mcpbench"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
)

// streamer is a session that can stream small frames for as long as its
// caller wants: what the concurrency and long-call sweeps need.
type streamer interface {
	session
	// openStream starts a stream of up to n frames of about 64 bytes
	// child→host and returns once it is asked for; read then receives
	// the frames, calling each once per frame from the reading goroutine,
	// until n arrived (nil) or ctx is done (nil: the stream is ended
	// cleanly first). Any other failure is an error. Until read runs,
	// the child's sends are held back by backpressure where the system
	// has it, so that many streams can be opened before any is read.
	openStream(ctx context.Context, n int) (read func(each func()) error, err error)
	// pids are the session's live child processes.
	pids() []int
}

// drainTimeout bounds the end of a stream a sweep stopped.
const drainTimeout = 30 * time.Second

func (ss *skulkSession) pids() []int {
	var out []int
	for _, c := range ss.h.Children() {
		if c.PID > 0 {
			out = append(out, c.PID)
		}
	}
	return out
}

func (ss *skulkSession) openStream(ctx context.Context, n int) (func(func()) error, error) {
	c, err := ss.h.Call(ctx, "count", frame.MustPayload(map[string]any{"n": n, "size": countPad}))
	if err != nil {
		return nil, err
	}
	return func(each func()) error { return readCount(ctx, c, n, each) }, nil
}

func readCount(ctx context.Context, c *host.Call, n int, each func()) error {
	got := 0
	for {
		f, err := c.Recv(ctx)
		if errors.Is(err, io.EOF) {
			if got != n {
				return fmt.Errorf("skulk: stream: got %d chunks, want %d", got, n)
			}
			return nil
		}
		if err != nil {
			if ctx.Err() == nil {
				c.Cancel()
				return err
			}
			return endCancelled(c)
		}
		switch f.Kind {
		case frame.KindChunk:
			got++
			each()
		case frame.KindFailed, frame.KindCancelled:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("skulk: call ended %s: %v", f.Kind, f.Error)
		}
	}
}

// endCancelled cancels c and reads it to its end.
func endCancelled(c *host.Call) error {
	c.Cancel()
	dctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	for {
		_, err := c.Recv(dctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if dctx.Err() != nil {
			return fmt.Errorf("skulk: a cancelled stream did not end: %w", dctx.Err())
		}
		if err != nil {
			return nil // the call ended with the cancel
		}
	}
}

func (gs *grpcSession) pids() []int { return []int{gs.pid} }

func (gs *grpcSession) openStream(ctx context.Context, n int) (func(func()) error, error) {
	sctx, cancel := context.WithCancel(ctx)
	st, err := gs.bench.Stream(sctx, gpbench.StreamRequest{Mode: gpbench.ModeStream, N: uint64(n), Size: payloadSize})
	if err != nil {
		cancel()
		return nil, err
	}
	return func(each func()) error {
		defer cancel()
		return readGRPC(ctx, st, n, each)
	}, nil
}

func readGRPC(ctx context.Context, st grpc.ClientStream, n int, each func()) error {
	var m gpbench.Msg
	got := 0
	for {
		err := st.RecvMsg(&m)
		if errors.Is(err, io.EOF) {
			if got != n {
				return fmt.Errorf("go-plugin: got %d messages, want %d", got, n)
			}
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		got++
		each()
	}
}

func (ms *mcpSession) pids() []int { return []int{ms.cmd.Process.Pid} }

// openStream of MCP starts nothing: the call is made by read, since MCP
// has no backpressure that could hold a started call's notifications.
func (ms *mcpSession) openStream(ctx context.Context, n int) (func(func()) error, error) {
	return func(each func()) error { return ms.streamFrames(ctx, n, each) }, nil
}

func (ms *mcpSession) streamFrames(ctx context.Context, n int, each func()) error {
	var got atomic.Int64
	all := make(chan struct{}) // closed by the n-th notification
	tok, done := ms.withProgress(func() {
		each()
		if got.Add(1) == int64(n) {
			close(all)
		}
	})
	defer done()
	p := &mcp.CallToolParams{Name: mcpbench.ToolStream, Arguments: mcpbench.StreamArgs{N: n, Size: payloadSize}}
	p.SetProgressToken(tok)
	res, err := ms.sess.CallTool(ctx, p)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if res.IsError {
		return errors.New("mcp: stream: tool error")
	}
	select { // the result can overtake the handler's last notifications
	case <-all:
		return nil
	case <-ctx.Done():
		return nil
	}
}

func (rs *rawSession) pids() []int { return []int{rs.cmd.Process.Pid} }

// pooled is a pool of children behind one caller's view: call spreads
// calls over them, pids lists them all.
type pooled interface {
	call(ctx context.Context) error
	pids() []int
	close() error
}

// openPool starts k children of s: one host with PoolSize k for Skulk; k
// sessions started at once for the others, which have no pool.
func openPool(ctx context.Context, s system, k int) (pooled, error) {
	if ss, ok := s.(*skulkSystem); ok {
		h, err := host.Start(ctx, host.Config{Command: ss.bin, ExtraEnv: ss.env, TempDir: ss.dir, PoolSize: k})
		if err != nil {
			return nil, fmt.Errorf("skulk: start: %w", err)
		}
		return &skulkSession{h: h}, nil
	}
	mp := &multiSession{sess: make([]streamer, k)}
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() { // ends with the start; waited for below
			sess, err := s.open(ctx)
			if err != nil {
				errs[i] = err
				return
			}
			st, ok := sess.(streamer)
			if !ok {
				sess.close()
				errs[i] = notApplicable(s.name() + " has no pool")
				return
			}
			mp.sess[i] = st
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		mp.close()
		return nil, err
	}
	return mp, nil
}

// multiSession is k sessions used round robin.
type multiSession struct {
	sess []streamer // nil where a start failed
	next atomic.Uint64
}

func (m *multiSession) call(ctx context.Context) error {
	i := m.next.Add(1) % uint64(len(m.sess))
	return m.sess[i].call(ctx)
}

func (m *multiSession) pids() []int {
	var out []int
	for _, s := range m.sess {
		if s != nil {
			out = append(out, s.pids()...)
		}
	}
	return out
}

func (m *multiSession) close() error {
	var wg sync.WaitGroup
	errs := make([]error, len(m.sess))
	for i, s := range m.sess {
		if s != nil {
			wg.Go(func() { errs[i] = s.close() }) // ends when the child stopped; waited for below
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}
