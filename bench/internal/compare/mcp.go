package compare

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skulkrt/skulk/bench/internal/mcpbench"
)

// mcpSystem is MCP over stdio: the go-sdk client's CommandTransport and
// mcpchild.
type mcpSystem struct {
	bin string // mcpchild binary
}

func (*mcpSystem) name() string { return "mcp" }

// mcpEchoWindow is how many echo calls the MCP echo workload keeps in
// flight: MCP has no client→server stream, so a bidirectional echo is
// pipelined calls, as many as Skulk's ingress queue holds.
const mcpEchoWindow = 8

// mcpSession is a started mcpchild and its client session.
type mcpSession struct {
	cmd  *exec.Cmd
	sess *mcp.ClientSession

	// progress routes progress notifications to the running call by its
	// token; the client's handler reads it.
	mu       sync.Mutex
	progress map[string]func() // token → hook
	tokens   atomic.Uint64
}

func (s *mcpSystem) start(ctx context.Context) (*mcpSession, error) {
	ms := &mcpSession{progress: make(map[string]func())}
	client := mcp.NewClient(&mcp.Implementation{Name: "skulk-bench-driver", Version: "v1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			tok, _ := req.Params.ProgressToken.(string)
			ms.mu.Lock()
			hook := ms.progress[tok]
			ms.mu.Unlock()
			if hook != nil {
				hook()
			}
		},
	})
	ms.cmd = exec.Command(s.bin)
	ms.cmd.Stderr = os.Stderr
	sess, err := client.Connect(ctx, &mcp.CommandTransport{Command: ms.cmd, TerminateDuration: time.Second}, nil)
	if err != nil {
		if ms.cmd.Process != nil {
			ms.cmd.Process.Kill()
			ms.cmd.Wait()
		}
		return nil, fmt.Errorf("mcp: connect: %w", err)
	}
	ms.sess = sess
	return ms, nil
}

func (s *mcpSystem) open(ctx context.Context) (session, error) { return s.start(ctx) }

func (s *mcpSystem) coldStart(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	ms, err := s.start(ctx)
	if err != nil {
		return 0, err
	}
	defer ms.close()
	if err := ms.call(ctx); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// withProgress registers hook for a new progress token and returns the
// token and its unregistration.
func (ms *mcpSession) withProgress(hook func()) (string, func()) {
	tok := fmt.Sprintf("t%d", ms.tokens.Add(1))
	ms.mu.Lock()
	ms.progress[tok] = hook
	ms.mu.Unlock()
	return tok, func() {
		ms.mu.Lock()
		delete(ms.progress, tok)
		ms.mu.Unlock()
	}
}

func (s *mcpSystem) crash(ctx context.Context) (time.Duration, error) {
	ms, err := s.start(ctx)
	if err != nil {
		return 0, err
	}
	defer ms.close()
	sleeping := make(chan struct{})
	var once sync.Once
	tok, done := ms.withProgress(func() { once.Do(func() { close(sleeping) }) })
	defer done()
	res := make(chan error, 1) // one value, sent by the caller below
	go func() {                // ends when the call returns: the kill below makes it fail
		p := &mcp.CallToolParams{Name: mcpbench.ToolSleep, Arguments: mcpbench.SleepArgs{MS: 60_000}}
		p.SetProgressToken(tok)
		_, err := ms.sess.CallTool(ctx, p)
		res <- err
	}()
	select {
	case <-sleeping:
	case err := <-res:
		return 0, fmt.Errorf("mcp: crash: the call ended before the kill: %v", err)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	t0 := time.Now()
	if err := syscall.Kill(ms.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		return 0, err
	}
	select {
	case err := <-res:
		d := time.Since(t0)
		if err == nil {
			return 0, errors.New("mcp: crash: the call succeeded after SIGKILL")
		}
		return d, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("mcp: crash: no failure seen: %w", ctx.Err())
	}
}

func (s *mcpSystem) healthUnderBackpressure(context.Context, int, int) ([]time.Duration, error) {
	return nil, notApplicable("MCP stdio has no backpressure: progress notifications the client does not consume queue in its memory without bound, so no stream can be blocked")
}

func (ms *mcpSession) smallStream(ctx context.Context, n int) error {
	var got atomic.Int64
	all := make(chan struct{}) // closed by the n-th notification
	tok, done := ms.withProgress(func() {
		if got.Add(1) == int64(n) {
			close(all)
		}
	})
	defer done()
	p := &mcp.CallToolParams{Name: mcpbench.ToolStream, Arguments: mcpbench.StreamArgs{N: n, Size: payloadSize}}
	p.SetProgressToken(tok)
	res, err := ms.sess.CallTool(ctx, p)
	if err != nil {
		return err
	}
	if res.IsError {
		return errors.New("mcp: stream: tool error")
	}
	// The result can overtake the handler's last notifications.
	select {
	case <-all:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("mcp: got %d notifications, want %d: %w", got.Load(), n, ctx.Err())
	}
}

func (ms *mcpSession) media(ctx context.Context, n, chunk int) error {
	for i := 0; i < n; i++ {
		res, err := ms.sess.CallTool(ctx, &mcp.CallToolParams{Name: mcpbench.ToolBlob, Arguments: mcpbench.BlobArgs{Bytes: chunk}})
		if err != nil {
			return err
		}
		if res.IsError || len(res.Content) != 1 {
			return errors.New("mcp: blob: tool error")
		}
		er, ok := res.Content[0].(*mcp.EmbeddedResource)
		if !ok || er.Resource == nil || len(er.Resource.Blob) != chunk {
			return errors.New("mcp: blob: not an embedded resource of the asked size")
		}
	}
	return nil
}

func (ms *mcpSession) echo(ctx context.Context, n int) error {
	var next atomic.Int64
	errs := make(chan error, mcpEchoWindow) // one value per worker
	for w := 0; w < mcpEchoWindow; w++ {
		go func() { // ends when all n calls are taken, or at its first error
			for next.Add(1) <= int64(n) {
				if err := ms.call(ctx); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	var err error
	for w := 0; w < mcpEchoWindow; w++ {
		err = errors.Join(err, <-errs)
	}
	return err
}

var echoText = strings.Repeat("x", payloadSize)

// unary is call: it is this system's unary form already.
func (ms *mcpSession) unary(ctx context.Context) error { return ms.call(ctx) }

func (ms *mcpSession) call(ctx context.Context) error {
	res, err := ms.sess.CallTool(ctx, &mcp.CallToolParams{Name: mcpbench.ToolEcho, Arguments: mcpbench.EchoArgs{Text: echoText}})
	if err != nil {
		return err
	}
	if res.IsError || len(res.Content) != 1 {
		return errors.New("mcp: echo: tool error")
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); !ok || len(tc.Text) != payloadSize {
		return errors.New("mcp: echo: wrong reply")
	}
	return nil
}

func (ms *mcpSession) close() error {
	err := ms.sess.Close() // closes stdin, waits, then SIGTERM and SIGKILL
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		err = nil // killed by a crash measurement, or stopped by Close
	}
	return err
}
