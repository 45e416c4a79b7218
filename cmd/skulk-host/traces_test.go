package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/skulkrt/skulk/internal/otlptest"
)

// otlpEnv is the environment that exports skulk-host's spans, and with
// --env its child's, to c.
func otlpEnv(c *otlptest.Collector) []string {
	return append(append(os.Environ(), c.Env()...),
		"OTEL_EXPORTER_OTLP_HEADERS=x-skulk-test=token", "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf")
}

// childArgs runs skulk-host's demo child, which exports its own spans when
// the host passes it the variables.
var childArgs = []string{"--env", "OTEL_TRACES_EXPORTER", "--env", "OTEL_EXPORTER_OTLP_ENDPOINT", "--", "<hostBin>", "demo-child"}

func withChild(args ...string) []string {
	out := append([]string(nil), args...)
	for _, a := range childArgs {
		if a == "<hostBin>" {
			a = hostBin
		}
		out = append(out, a)
	}
	return out
}

// byKind returns the client and the server span of the spans, failing
// unless there is exactly one of each.
func byKind(t *testing.T, spans []otlptest.Span) (client, server otlptest.Span) {
	t.Helper()
	var nc, ns int
	for _, s := range spans {
		switch s.GetKind() {
		case tracepb.Span_SPAN_KIND_CLIENT:
			client, nc = s, nc+1
		case tracepb.Span_SPAN_KIND_SERVER:
			server, ns = s, ns+1
		}
	}
	require.Falsef(t, nc != 1 || ns != 1, "received %d client and %d server spans, want one each", nc, ns)
	return client, server
}

// The call's host span and the child's server span reach an OTLP/HTTP
// endpoint, in one trace, by the time skulk-host has exited.
func TestCallTracesOTLP(t *testing.T) {
	t.Parallel()
	c := otlptest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, hostBin, withChild("call", "count", "--args", `{"n": 2}`)...)
	cmd.Env = otlpEnv(c)
	if out, err := cmd.CombinedOutput(); err != nil {
		require.FailNow(t, fmt.Sprintf("call: %v\n%s", err, out))
	}
	client, server := byKind(t, c.Spans())
	if len(client.GetTraceId()) != 16 || string(client.GetTraceId()) != string(server.GetTraceId()) {
		require.FailNow(t, fmt.Sprintf("trace ids: host %x, child %x; want one", client.GetTraceId(), server.GetTraceId()))
	}
	if string(server.GetParentSpanId()) != string(client.GetSpanId()) {
		assert.Fail(t, fmt.Sprintf("child span's parent %x, want the host span %x", server.GetParentSpanId(), client.GetSpanId()))
	}
	if client.GetName() != "count" || server.GetName() != "count" {
		assert.Fail(t, fmt.Sprintf("span names %q, %q; want count", client.GetName(), server.GetName()))
	}
	assert.Falsef(t, client.Service != "skulk-host" || server.Service != "skulk-host-demo-child", "service.name %q, %q; want skulk-host, skulk-host-demo-child", client.Service, server.Service)
	drained := false
	for _, s := range c.Spans() {
		drained = drained || s.GetName() == "skulk.drain" && s.Service == "skulk-host" &&
			otlptest.Attr(s.GetAttributes(), "skulk.restart.reason").GetStringValue() == "closed"
	}
	assert.Falsef(t, !drained, "no skulk.drain span of the child's drain when the command ended")
	if got := otlptest.Attr(client.GetAttributes(), "rpc.system").GetStringValue(); got != "skulk" {
		assert.Fail(t, fmt.Sprintf("rpc.system = %q, want skulk", got))
	}
	assert.Falsef(t, client.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR, "completed call's span has an error status")
	// The host sends OTEL_EXPORTER_OTLP_HEADERS; the child was not given
	// them (no --env for it).
	if got := c.Headers("skulk-host").Get("X-Skulk-Test"); got != "token" {
		assert.Fail(t, fmt.Sprintf("OTEL_EXPORTER_OTLP_HEADERS: the host's request has x-skulk-test = %q, want token", got))
	}
	if got := c.Headers("skulk-host-demo-child").Get("X-Skulk-Test"); got != "" {
		assert.Fail(t, fmt.Sprintf("the child's request has x-skulk-test = %q, but it was not passed the variable", got))
	}
}

// SIGINT ends a running call cancelled; its span is still exported, with
// an error status, before skulk-host exits.
func TestCallTracesOTLPFlushedOnSignal(t *testing.T) {
	t.Parallel()
	c := otlptest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, hostBin, "call", "upper", "--input", "-", "--", childBin)
	cmd.Env = otlpEnv(c)
	cmd.WaitDelay = 10 * time.Second
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	// The call is running once its first chunk came back.
	_, err = io.WriteString(stdin, "hello\n")
	require.NoError(t, err)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && !strings.Contains(sc.Text(), "HELLO") {
	}
	go io.Copy(io.Discard, stdout) // the rest, until the command exits
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 13 {
		require.FailNow(t, fmt.Sprintf("call after SIGINT: %v, want exit status 13 (cancelled)", err))
	}
	spans := c.Spans()
	var client *otlptest.Span
	for i := range spans {
		if spans[i].GetKind() == tracepb.Span_SPAN_KIND_CLIENT {
			client = &spans[i]
		}
	}
	require.Falsef(t, client == nil, "no host span received after SIGINT (%d spans)", len(spans))
	if client.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR ||
		otlptest.Attr(client.GetAttributes(), "rpc.response.status_code").GetStringValue() != "cancelled" {
		assert.Fail(t, fmt.Sprintf("cancelled call's span: status %v, code %v; want Error, cancelled",
			client.GetStatus(), otlptest.Attr(client.GetAttributes(), "rpc.response.status_code")))
	}
	if id := hex.EncodeToString(client.GetTraceId()); len(id) != 32 {
		assert.Fail(t, fmt.Sprintf("trace id %q", id))
	}
}

// A value the exporters do not know is a usage error that names its
// variable, and nothing is started.
func TestCallTracesBadSettings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ env, name string }{
		{"OTEL_TRACES_EXPORTER=jaeger", "OTEL_TRACES_EXPORTER"},
		{"OTEL_TRACES_EXPORTER=otlp,zipkin", "OTEL_TRACES_EXPORTER"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL=http/json", "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=thrift", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
	} {
		cmd := exec.Command(hostBin, "call", "count", "--args", `{"n": 1}`, "--", childBin)
		cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=otlp", tc.env)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
			assert.Fail(t, fmt.Sprintf("%s: %v, want exit status 2 (usage)", tc.env, err))
		}
		value := tc.env[strings.IndexByte(tc.env, '=')+1:]
		if !strings.Contains(stderr.String(), tc.name) || strings.Contains(stderr.String(), value) {
			assert.Fail(t, fmt.Sprintf("%s: stderr %q should name %s and not echo the value", tc.env, stderr.String(), tc.name))
		}
	}
}

// grpcCollector receives OTLP/gRPC exports.
type grpcCollector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (g *grpcCollector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			g.spans = append(g.spans, ss.GetSpans()...)
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// OTEL_EXPORTER_OTLP_PROTOCOL=grpc exports over OTLP/gRPC.
func TestCallTracesOTLPGRPC(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := &grpcCollector{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, g)
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(ln) }() // stopped by Stop below
	defer func() { srv.Stop(); <-served }()

	cmd := exec.Command(hostBin, "call", "count", "--args", `{"n": 1}`, "--", childBin)
	cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://"+ln.Addr().String())
	if out, err := cmd.CombinedOutput(); err != nil {
		require.FailNow(t, fmt.Sprintf("call: %v\n%s", err, out))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var names []string
	for _, s := range g.spans {
		names = append(names, s.GetName()+"/"+s.GetKind().String())
	}
	// The call's span, and the drain of its child when the command ended.
	require.Falsef(t, len(names) != 2 || names[0] != "count/SPAN_KIND_CLIENT" && names[1] != "count/SPAN_KIND_CLIENT", "received %v over gRPC, want the call's client span and the drain's", names)
}

// A call made with trace export on keeps its span's ids in every journal
// event: follow prints them, replay shows them, and the ASIF export's
// tool_call has them; without trace export the events have none.
func TestCallJournalCarriesTraceIDs(t *testing.T) {
	t.Parallel()
	c := otlptest.New(t)
	journal := filepath.Join(t.TempDir(), "calls.db")
	cmd := exec.Command(hostBin, "call", "count", "--args", `{"n": 2}`, "--journal", journal, "--", childBin)
	cmd.Env = otlpEnv(c)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		require.FailNow(t, fmt.Sprintf("call: %v\n%s", err, stderr.String()))
	}
	tree := regexp.MustCompile(`journal: tree (\S+) in`).FindStringSubmatch(stderr.String())
	if tree == nil {
		require.FailNow(t, fmt.Sprintf("no tree on stderr: %s", stderr.String()))
	}
	client, _ := clientSpans(c.Spans())
	require.EqualValuesf(t, 1, len(client), "%d client spans exported, want the call's", len(client))
	traceID, spanID := hex.EncodeToString(client[0].GetTraceId()), hex.EncodeToString(client[0].GetSpanId())

	r := run(t, "", "follow", journal, tree[1])
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	require.Falsef(t, r.Status != 0 || len(lines) < 4, "follow: status %d, %d lines: %s", r.Status, len(lines), r.Stderr)
	for _, line := range lines {
		var ev struct {
			Kind    string `json:"kind"`
			TraceID string `json:"trace_id"`
			SpanID  string `json:"span_id"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &ev))
		assert.Falsef(t, ev.TraceID != traceID || ev.SpanID != spanID, "%s event: trace_id %q span_id %q, want the exported span's %s %s", ev.Kind, ev.TraceID, ev.SpanID, traceID, spanID)
	}
	if r := run(t, "", "replay", journal, tree[1]); !strings.Contains(r.Stdout, "trace: "+traceID+" span "+spanID) {
		assert.Fail(t, fmt.Sprintf("replay does not show the trace:\n%s", r.Stdout))
	}
	if r := run(t, "", "asif", "export", journal, tree[1]); r.Status != 0 || !strings.Contains(r.Stdout, `"skulk/trace"`) || !strings.Contains(r.Stdout, traceID) {
		assert.Fail(t, fmt.Sprintf("asif export: status %d, no skulk/trace extension with the trace id: %s", r.Status, r.Stderr))
	}

	// Trace export off: no ids.
	off := filepath.Join(t.TempDir(), "off.db")
	r = run(t, "", "call", "count", "--args", `{"n": 1}`, "--journal", off, "--", childBin)
	if tree = regexp.MustCompile(`journal: tree (\S+) in`).FindStringSubmatch(r.Stderr); r.Status != 0 || tree == nil {
		require.FailNow(t, fmt.Sprintf("call without tracing: %d %s", r.Status, r.Stderr))
	}
	if r := run(t, "", "follow", off, tree[1]); r.Status != 0 || strings.Contains(r.Stdout, "trace_id") {
		assert.Fail(t, fmt.Sprintf("tracing off: follow status %d, output has trace ids: %s", r.Status, r.Stdout))
	}
}

// clientSpans splits spans into the client ones (calls) and the rest.
func clientSpans(spans []otlptest.Span) (client, other []otlptest.Span) {
	for _, s := range spans {
		if s.GetKind() == tracepb.Span_SPAN_KIND_CLIENT {
			client = append(client, s)
		} else {
			other = append(other, s)
		}
	}
	return client, other
}

// A call that fails (exit status 10) still has its span exported before
// skulk-host exits, with the error.
func TestCallTracesOTLPFlushedOnFailure(t *testing.T) {
	t.Parallel()
	c := otlptest.New(t)
	cmd := exec.Command(hostBin, "call", "fail", "--args", `{"message": "no"}`, "--", childBin)
	cmd.Env = otlpEnv(c)
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 10 {
		require.FailNow(t, fmt.Sprintf("call fail: %v, want exit status 10", err))
	}
	client, _ := clientSpans(c.Spans())
	require.Falsef(t, len(client) != 1 || client[0].GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR ||
		otlptest.Attr(client[0].GetAttributes(), "error.type").GetStringValue() != "provider_error", "client spans %v, want the failed call's with error.type provider_error", client)
}
