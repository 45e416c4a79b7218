package remote_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/jetstreamstore"
	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/remote"
)

// The test binary plays, by this variable, a provider child or a serving
// host process (a host with a pool of that child, served on NATS), so a
// test can SIGKILL a serving host.
const (
	roleEnv = "SKULK_REMOTE_TEST_ROLE"
	dirEnv  = "SKULK_REMOTE_TEST_DIR"  // where the test tools leave their markers
	natsEnv = "SKULK_REMOTE_TEST_NATS" // the serving host's NATS servers, comma-separated
	nameEnv = "SKULK_REMOTE_TEST_NAME"
	idEnv   = "SKULK_REMOTE_TEST_ID"
	// journalEnv, when set, is the serving host's journal: a JetStream
	// store URL (nats://HOST:PORT/STREAM), required.
	journalEnv = "SKULK_REMOTE_TEST_JOURNAL"
)

// testOptions are the heartbeat settings of the tests' clients and hosts:
// a dead host is found within 2.125 s.
var testOptions = remote.Options{HeartbeatInterval: 250 * time.Millisecond, HeartbeatTimeout: 2 * time.Second}

// dialTools connects to the NATS server at url and dials "tools" with
// testOptions; the test's cleanup closes the client, then the connection.
func dialTools(t *testing.T, url string) *remote.Client {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	cl, err := remote.Dial(nc, "tools", testOptions)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, cl.Close()) })
	return cl
}

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "child":
		os.Exit(child.Run(child.Options{Tools: testTools()}))
	case "serve":
		os.Exit(serveMain())
	}
	goleak.VerifyTestMain(m)
}

// serveMain runs a serving host until SIGTERM: a pool of two children
// (this binary as "child"), served as NAME with id ID. It prints "ready"
// once served.
func serveMain() int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var log calllog.Options
	if url := os.Getenv(journalEnv); url != "" {
		st, err := jetstreamstore.Open(context.Background(), url, jetstreamstore.Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "journal:", err)
			return 1
		}
		defer st.Close()
		log.Journal = &calllog.Journal{Store: st, Required: true}
	}
	h, err := host.Start(context.Background(), host.Config{
		Command: exe, Args: []string{"-test.run=^$"}, PoolSize: 2,
		ExtraEnv: []string{roleEnv + "=child", dirEnv + "=" + os.Getenv(dirEnv), "GORACE=atexit_sleep_ms=0"},
		CallLog:  log,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "host:", err)
		return 1
	}
	defer h.Close(context.Background())
	nc, err := nats.Connect(os.Getenv(natsEnv), nats.DontRandomize(), nats.ReconnectWait(50*time.Millisecond), nats.MaxReconnects(-1))
	if err != nil {
		fmt.Fprintln(os.Stderr, "nats:", err)
		return 1
	}
	defer nc.Close()
	s, err := remote.Serve(nc, os.Getenv(nameEnv), h, remote.ServeOptions{Options: testOptions, ID: os.Getenv(idEnv)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		return 1
	}
	if err := nc.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "flush:", err)
		return 1
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "close:", err)
		return 1
	}
	return 0
}

func object(props map[string]any) map[string]any {
	return map[string]any{"type": "object", "properties": props}
}

// testTools are the children's tools.
//
//   - echo streams each caller chunk back (payload and media).
//   - tick sends n chunks, then waits ms (or its cancellation, which it
//     notes in the marker file: "cancelled" or "timeout").
//   - flood sends media chunks of size bytes until cancelled, writing how
//     many it sent to the marker file after each.
func testTools() []child.Tool {
	return []child.Tool{
		{
			ID: "echo", ArgumentsSchema: object(map[string]any{}),
			InputSchema:  object(map[string]any{"n": map[string]any{"type": "integer"}}),
			ResultSchema: object(map[string]any{"chunks": map[string]any{"type": "integer"}}),
			Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
				n := 0
				for f, err := range s.Input() {
					if err != nil {
						return nil, err
					}
					if err := s.Send(f.Payload, f.Media); err != nil {
						return nil, err
					}
					n++
				}
				return frame.MustPayload(map[string]any{"chunks": n}), nil
			},
		},
		{
			ID: "tick", NoInput: true,
			ArgumentsSchema: map[string]any{"type": "object", "required": []any{"ms"}, "properties": map[string]any{
				"ms": map[string]any{"type": "integer", "minimum": 0}, "n": map[string]any{"type": "integer", "default": 1},
				"marker": map[string]any{"type": "string", "default": ""}}},
			Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
				var a struct {
					MS     int64  `json:"ms"`
					N      int    `json:"n"`
					Marker string `json:"marker"`
				}
				if err := s.Arguments().Decode(&a); err != nil {
					return nil, err
				}
				for i := range a.N {
					if err := s.Send(frame.MustPayload(map[string]any{"i": i, "pid": os.Getpid()}), nil); err != nil {
						return nil, err
					}
				}
				select {
				case <-time.After(time.Duration(a.MS) * time.Millisecond):
					return frame.MustPayload(map[string]any{"slept_ms": a.MS}), nil
				case <-ctx.Done():
					mark(a.Marker, causeName(ctx))
					return nil, context.Cause(ctx)
				}
			},
		},
		{
			ID: "flood", NoInput: true,
			ArgumentsSchema: map[string]any{"type": "object", "required": []any{"size", "marker"}},
			Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
				var a struct {
					Size   int    `json:"size"`
					Marker string `json:"marker"`
				}
				if err := s.Arguments().Decode(&a); err != nil {
					return nil, err
				}
				b := make([]byte, a.Size)
				for n := 1; ; n++ {
					if err := s.Send(nil, &frame.InlineMedia{Data: b, MediaType: "application/octet-stream"}); err != nil {
						mark(a.Marker+".end", causeName(ctx))
						return nil, err
					}
					mark(a.Marker, strconv.Itoa(n))
				}
			},
		},
	}
}

func causeName(ctx context.Context) string {
	if errors.Is(context.Cause(ctx), child.ErrTimeout) {
		return "timeout"
	}
	return "cancelled"
}

// mark writes a marker file of the test's (atomically: a reader sees the
// old content or the new).
func mark(name, content string) {
	dir := os.Getenv(dirEnv)
	if name == "" || dir == "" {
		return
	}
	tmp := filepath.Join(dir, name+".tmp")
	if os.WriteFile(tmp, []byte(content), 0o600) == nil {
		_ = os.Rename(tmp, filepath.Join(dir, name))
	}
}

// readMarker returns a marker's content, "" when there is none.
func readMarker(dir, name string) string {
	b, _ := os.ReadFile(filepath.Join(dir, name))
	return strings.TrimSpace(string(b))
}

// waitReady reads a serving process's stdout until "ready".
func waitReady(sc *bufio.Scanner) error {
	for sc.Scan() {
		if sc.Text() == "ready" {
			return nil
		}
	}
	return errors.New("the serving host exited before it was ready")
}
