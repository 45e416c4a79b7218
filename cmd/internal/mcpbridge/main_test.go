package mcpbridge_test

// These tests run real processes: skulk-host, cmd/skulk-child and
// cmd/skulk-mcp built by TestMain, and this test binary itself, which
// becomes an MCP stdio server written with the go-sdk when
// MCPBRIDGE_TEST_SERVER is set (as os/exec's tests impersonate helpers).
//
// Most of them run side by side (t.Parallel, as many at a time as
// -parallel allows): each mostly waits for the processes it starts, and
// keeps its temporary directories, servers (on port 0) and skulk-host
// processes to itself. A test runs alone, before them, and says why, if
// it measures latency, has a time bound that other tests' processes
// running beside it could break, or starts a Host in this process. While
// a Host runs, it makes the whole process a child subreaper: an orphan of
// another test's commands would become this process's child, not init's,
// and processGone, which takes only a zombie whose parent is init for
// gone, would fail that test.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/skulkrt/skulk/internal/testnet"
)

const (
	envServer = "MCPBRIDGE_TEST_SERVER" // set: this binary is the test MCP server
	envMark   = "MCPBRIDGE_TEST_MARK"   // a file the server appends what it saw to (cancellations)
	envCrash  = "MCPBRIDGE_TEST_CRASH"  // a file that, while it exists, makes the server exit 3 as it starts

	// envGORACE goes with --env to every mcp serve that runs skulk-mcp
	// (and the test server under it), and raceExitEnv into every
	// host.Config that does: a host passes its children only a few
	// variables, and without the GORACE of QuickRaceExit the race-built
	// skulk-mcp and test server each pause a second as they exit.
	envGORACE = "GORACE"
)

// Paths of the binaries TestMain builds.
var hostBin, childBin, wrapperBin, selfBin string

func TestMain(m *testing.M) {
	if os.Getenv(envServer) != "" {
		runTestServer()
		return
	}
	dir, err := os.MkdirTemp("", "mcpbridge-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	hostBin, childBin, wrapperBin = filepath.Join(dir, "skulk-host"), filepath.Join(dir, "skulk-child"), filepath.Join(dir, "skulk-mcp")
	if selfBin, err = os.Executable(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The commands are built as this test binary was (-race or not), the
	// child without -race (testnet.BuildCommandAs).
	testnet.QuickRaceExit()
	for _, b := range []struct {
		out, pkg string
		build    func(bin, pkg string) (string, error)
	}{{hostBin, "github.com/skulkrt/skulk/cmd/skulk-host", testnet.BuildCommandAs}, {childBin, "github.com/skulkrt/skulk/cmd/skulk-child", testnet.BuildAs}, {wrapperBin, "github.com/skulkrt/skulk/cmd/skulk-mcp", testnet.BuildCommandAs}} {
		if _, err := b.build(b.out, b.pkg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	goleak.VerifyTestMain(m, testnet.CleanupAndExit(func() { os.RemoveAll(dir) }))
}

// Arguments of the test server's tools.
type (
	echoArgs struct {
		Text string `json:"text"`
	}
	progressArgs struct {
		N int `json:"n"`
	}
	mediaArgs struct {
		Bytes int `json:"bytes"`
	}
	sleepArgs struct {
		MS int `json:"ms"`
	}
	countResult struct {
		N int `json:"n"`
	}
	pidResult struct {
		PID  int `json:"pid"`
		PPID int `json:"ppid"`
	}
)

// Steps of the test media's byte patterns (mediaBytes), one per kind, so
// that an image is never taken for a sound.
const (
	imageStep = 7
	audioStep = 13
)

// mediaBytes is the test server's media: n bytes, byte i being i*step.
func mediaBytes(n, step int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * step)
	}
	return b
}

// The text contents of the texts tool, in order; an image comes between
// textsBefore and textsAfter.
var (
	textsBefore = []string{"one ", "two ", "three"}
	textsAfter  = []string{"four", "five"}
)

// runTestServer is the test MCP server: tools written with the go-sdk,
// served over stdio.
func runTestServer() {
	if p := os.Getenv(envCrash); p != "" {
		if _, err := os.Stat(p); err == nil {
			fmt.Fprintln(os.Stderr, "test server: crashing at start on purpose")
			os.Exit(3)
		}
	}
	mark := func(s string) {
		if p := os.Getenv(envMark); p != "" {
			f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err == nil {
				fmt.Fprintln(f, s)
				f.Close()
			}
		}
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "mcpbridge-test", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "returns its text"},
		func(ctx context.Context, req *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.Text}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "progress", Description: "n progress notifications, then done"},
		func(ctx context.Context, req *mcp.CallToolRequest, a progressArgs) (*mcp.CallToolResult, countResult, error) {
			if tok := req.Params.GetProgressToken(); tok != nil {
				for i := range a.N {
					err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i + 1), Total: float64(a.N), Message: fmt.Sprintf("step %d", i+1)})
					if err != nil {
						return nil, countResult{}, err
					}
				}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, countResult{N: a.N}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "image", Description: "a PNG-typed image of bytes bytes"},
		func(ctx context.Context, req *mcp.CallToolRequest, a mediaArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{Data: mediaBytes(a.Bytes, imageStep), MIMEType: "image/png"}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "audio", Description: "a WAV-typed sound of bytes bytes"},
		func(ctx context.Context, req *mcp.CallToolRequest, a mediaArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.AudioContent{Data: mediaBytes(a.Bytes, audioStep), MIMEType: "audio/wav"}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "resources", Description: "an embedded blob, an embedded text and a resource link"},
		func(ctx context.Context, req *mcp.CallToolRequest, a struct{}) (*mcp.CallToolResult, any, error) {
			size := int64(42)
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "test://blob", MIMEType: "application/pdf", Blob: mediaBytes(8, imageStep)}},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "test://text", MIMEType: "text/plain", Text: "hello"}},
				&mcp.ResourceLink{URI: "test://link", Name: "linked", MIMEType: "text/csv", Size: &size},
			}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "texts", Description: "text contents, a 16-byte image, more text contents"},
		func(ctx context.Context, req *mcp.CallToolRequest, a struct{}) (*mcp.CallToolResult, any, error) {
			var content []mcp.Content
			for _, t := range textsBefore {
				content = append(content, &mcp.TextContent{Text: t})
			}
			content = append(content, &mcp.ImageContent{Data: mediaBytes(16, imageStep), MIMEType: "image/png"})
			for _, t := range textsAfter {
				content = append(content, &mcp.TextContent{Text: t})
			}
			return &mcp.CallToolResult{Content: content}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "sleep", Description: "one progress notification, then waits ms or until cancelled"},
		func(ctx context.Context, req *mcp.CallToolRequest, a sleepArgs) (*mcp.CallToolResult, any, error) {
			if tok := req.Params.GetProgressToken(); tok != nil {
				if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Message: "sleeping"}); err != nil {
					return nil, nil, err
				}
			}
			t := time.NewTimer(time.Duration(a.MS) * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				mark("cancelled sleep")
				return nil, nil, ctx.Err()
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "slept"}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "a tool error"},
		func(ctx context.Context, req *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "nope: " + a.Text}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "crash", Description: "exits the server with status 3"},
		func(ctx context.Context, req *mcp.CallToolRequest, a struct{}) (*mcp.CallToolResult, any, error) {
			fmt.Fprintln(os.Stderr, "test server: crashing on purpose")
			os.Exit(3)
			return nil, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "log", Description: "sends a log notification of its text at level info"},
		func(ctx context.Context, req *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
			err := req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "test-server", Data: a.Text}) //nolint:staticcheck // the wrapper still serves MCP logging
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "logged"}}}, nil, err
		})
	mcp.AddTool(s, &mcp.Tool{Name: "stray", Description: "writes its text on stdout as a line of its own, not JSON-RPC (a stray print), and returns it"},
		func(ctx context.Context, req *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
			fmt.Fprintln(os.Stdout, a.Text) // the server writes nothing else while the call runs
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.Text}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "pid", Description: "the server's pid and its parent's"},
		func(ctx context.Context, req *mcp.CallToolRequest, a struct{}) (*mcp.CallToolResult, pidResult, error) {
			return nil, pidResult{PID: os.Getpid(), PPID: os.Getppid()}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "sample", Description: "asks its client to sample a reply to its text; returns the reply and the model"},
		func(ctx context.Context, req *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
			res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{ //nolint:staticcheck // still served
				MaxTokens: 100, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: a.Text}}},
			})
			if err != nil {
				return nil, nil, err
			}
			text, _ := res.Content.(*mcp.TextContent)
			if text == nil {
				return nil, nil, fmt.Errorf("the sampled content is %T", res.Content)
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text.Text + " (" + res.Model + ")"}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "ask", Description: "asks its client's user for a name; returns the action and the name"},
		func(ctx context.Context, req *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
			res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: a.Text, RequestedSchema: map[string]any{
				"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}, "required": []string{"name"},
			}})
			if err != nil {
				return nil, nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%s %v", res.Action, res.Content["name"])}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "grow", Description: "adds a resource test://grown and a prompt grown, outside any call, and logs outside any call at level info after its result"},
		func(ctx context.Context, req *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
			ss := req.Session
			go func() { // ends after its two changes and its log line
				time.Sleep(50 * time.Millisecond) // after the call's result: outside it
				s.AddResource(&mcp.Resource{URI: "test://grown", Name: "grown", MIMEType: "text/plain"},
					func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
						return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "test://grown", Text: "grown"}}}, nil
					})
				s.AddPrompt(&mcp.Prompt{Name: "grown", Description: "a prompt added while serving"},
					func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
						return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "grown"}}}}, nil
					})
				_ = ss.Log(context.Background(), &mcp.LoggingMessageParams{Level: "info", Logger: "test-server", Data: "outside: " + a.Text}) //nolint:staticcheck // still served
			}()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "growing"}}}, nil, nil
		})
	addLossTools(s)
	s.AddResource(&mcp.Resource{URI: bigResource, Name: "big", MIMEType: "application/octet-stream"},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: bigResource, MIMEType: "application/octet-stream", Blob: mediaBytes(1<<20, imageStep)}}}, nil
		})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "test server:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// raceExitEnv is this process's GORACE as host.Config.ExtraEnv (envGORACE
// says why); nothing when GORACE is unset.
func raceExitEnv() []string {
	if v, ok := os.LookupEnv(envGORACE); ok {
		return []string{envGORACE + "=" + v}
	}
	return nil
}

// processGone waits up to d for pid to be gone: no such process, or a
// zombie that is not ours to reap (an orphan reparented to init).
func processGone(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := syscall.Kill(pid, 0)
		if errors.Is(err, syscall.ESRCH) {
			return
		}
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			if f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:])); len(f) > 1 && f[0] == "Z" && f[1] == "1" {
				return
			}
		}
		require.Falsef(t, time.Now().After(deadline), "process %d still there after %v", pid, d)
		time.Sleep(20 * time.Millisecond)
	}
}

// isGuardian reports whether pid is a host's guardian (/bin/sh running
// the host's guardian script), which every host.Host starts beside its
// children.
func isGuardian(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	arg0, _, _ := bytes.Cut(b, []byte{0})
	return string(arg0) == "/bin/sh"
}

// waitChild waits up to d for pid to have exactly one child, other than
// except and the host's guardian, and returns it.
func waitChild(t *testing.T, pid, except int, d time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		var kids []int
		for _, k := range testnet.Children(pid) {
			if k != except && !isGuardian(k) {
				kids = append(kids, k)
			}
		}
		if len(kids) == 1 {
			return kids[0]
		}
		require.Falsef(t, time.Now().After(deadline), "process %d has children %v, want one (besides %d)", pid, kids, except)
		time.Sleep(20 * time.Millisecond)
	}
}

// emptyDir checks that dir holds nothing (no socket directory, no file).
func emptyDir(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	if len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		require.FailNow(t, fmt.Sprintf("%s still holds %v", dir, names))
	}
}

// shortTempDir is a temporary directory with a path short enough for the
// host's socket paths.
func shortTempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "mb")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// progressLog collects the progress notifications a client receives, by
// token.
type progressLog struct {
	mu   sync.Mutex
	got  map[string][]*mcp.ProgressNotificationParams
	more chan struct{} // signalled (never blocking) on every notification
}

func newProgressLog() *progressLog {
	return &progressLog{got: make(map[string][]*mcp.ProgressNotificationParams), more: make(chan struct{}, 1)}
}

func (p *progressLog) handler(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	tok := fmt.Sprint(req.Params.ProgressToken)
	p.mu.Lock()
	p.got[tok] = append(p.got[tok], req.Params)
	p.mu.Unlock()
	select {
	case p.more <- struct{}{}:
	default:
	}
}

// wait returns the notifications of tok once there are n, failing after d.
func (p *progressLog) wait(t *testing.T, tok string, n int, d time.Duration) []*mcp.ProgressNotificationParams {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		p.mu.Lock()
		got := append([]*mcp.ProgressNotificationParams(nil), p.got[tok]...)
		p.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-p.more:
		case <-timer.C:
			require.FailNow(t, fmt.Sprintf("progress %s: got %d notifications, want %d", tok, len(got), n))
		}
	}
}

// newClient is a go-sdk client that logs progress into p.
func newClient(p *progressLog) *mcp.Client { return notifiedClient(p, nil) }

// notifiedClient is newClient that also sends on changed at every
// tools/list_changed, never blocking the client (a test needs to know
// that one came, not how many); a nil changed sets no handler.
func notifiedClient(p *progressLog, changed chan<- struct{}) *mcp.Client {
	opts := &mcp.ClientOptions{ProgressNotificationHandler: p.handler}
	if changed != nil {
		opts.ToolListChangedHandler = func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}
	return mcp.NewClient(&mcp.Implementation{Name: "mcpbridge-test-client", Version: "1"}, opts)
}

// stderrLines collects a process's stderr and lets a test wait for a line.
type stderrLines struct {
	mu    sync.Mutex
	lines []string
	done  chan struct{}
}

func collectStderr(cmd *exec.Cmd) (*stderrLines, error) {
	r, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	s := &stderrLines{done: make(chan struct{})}
	go func() { // stopped by the process closing its stderr
		defer close(s.done)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			s.mu.Lock()
			s.lines = append(s.lines, sc.Text())
			s.mu.Unlock()
		}
	}()
	return s, nil
}

func (s *stderrLines) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

// waitPrefix returns the rest of the first line starting with prefix.
func (s *stderrLines) waitPrefix(t *testing.T, prefix string, d time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		s.mu.Lock()
		for _, l := range s.lines {
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				s.mu.Unlock()
				return rest
			}
		}
		s.mu.Unlock()
		require.Falsef(t, time.Now().After(deadline), "no stderr line %q after %v; stderr:\n%s", prefix, d, s)
		time.Sleep(20 * time.Millisecond)
	}
}
