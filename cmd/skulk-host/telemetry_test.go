package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/cmd/internal/cli"
)

// A call run with --metrics-addr serves /metrics while it runs, in the
// Prometheus text format: the call in flight and the child ready.
func TestCallMetricsAddr(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, hostBin, "call", "upper", "--input", "-", "--metrics-addr", "127.0.0.1:0", "--", childBin)
	cmd.WaitDelay = 5 * time.Second
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	var stdout strings.Builder
	cmd.Stdout = &stdout
	require.NoError(t, cmd.Start())
	defer cmd.Wait()
	defer stdin.Close()

	sc := bufio.NewScanner(stderr)
	addrRE := regexp.MustCompile(`metrics on (http://\S+/metrics)`)
	var url string
	for url == "" && sc.Scan() {
		if m := addrRE.FindStringSubmatch(sc.Text()); m != nil {
			url = m[1]
		}
	}
	if url == "" {
		require.FailNow(t, fmt.Sprintf("no metrics address on stderr: %v", sc.Err()))
	}
	go io.Copy(io.Discard, stderr) // the rest of stderr, until the command exits
	_, err = io.WriteString(stdin, "hello\n")
	require.NoError(t, err)

	// The server is up before the child: until the host started, a scrape
	// has only the call counters.
	var fams map[string]*dto.MetricFamily
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		fams = scrape(ctx, t, url)
		if f := fams["skulk_calls_in_flight"]; f != nil && f.GetMetric()[0].GetGauge().GetValue() == 1 {
			break
		}
		if time.Now().After(deadline) {
			require.FailNow(t, fmt.Sprintf("skulk_calls_in_flight never 1: %v", fams["skulk_calls_in_flight"]))
		}
	}
	ready := false
	for _, m := range fams["skulk_child_state"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "state" && l.GetValue() == "ready" && m.GetGauge().GetValue() == 1 {
				ready = true
			}
		}
	}
	if !ready {
		assert.Fail(t, fmt.Sprintf("skulk_child_state{state=\"ready\"} is not 1: %v", fams["skulk_child_state"]))
	}
	for _, name := range []string{"skulk_child_restarts_total", "skulk_child_stuck_handlers"} {
		assert.Falsef(t, fams[name] == nil, "%s missing", name)
	}
	stdin.Close()
	require.NoError(t, cmd.Wait(), "call")
	if !strings.Contains(stdout.String(), "HELLO") {
		assert.Fail(t, fmt.Sprintf("stdout %q lacks the call's output", stdout.String()))
	}
	listenerClosed(t, url)
}

// listenerClosed fails the test unless nothing listens at url's address
// any more: the command closed its metrics listener.
func listenerClosed(t *testing.T, url string) {
	t.Helper()
	addr := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/metrics")
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		c.Close()
		assert.Fail(t, fmt.Sprintf("something still listens on %s after the command ended", addr))
	}
}

// metricsURL reads stderr until the line that gives the metrics address,
// then discards the rest in a goroutine that ends with the command.
func metricsURL(t *testing.T, stderr io.Reader) string {
	t.Helper()
	sc := bufio.NewScanner(stderr)
	addrRE := regexp.MustCompile(`metrics on (http://\S+/metrics)`)
	for sc.Scan() {
		if m := addrRE.FindStringSubmatch(sc.Text()); m != nil {
			go io.Copy(io.Discard, stderr) // ends at the command's exit
			return m[1]
		}
	}
	require.FailNow(t, fmt.Sprintf("no metrics address on stderr: %v", sc.Err()))
	return ""
}

// counter returns the value of the series of fam whose labels include
// every pair of want, and whether there is one.
func counter(fam *dto.MetricFamily, want map[string]string) (float64, bool) {
	for _, m := range fam.GetMetric() {
		match := 0
		for _, l := range m.GetLabel() {
			if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
				match++
			}
		}
		if match == len(want) {
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// mcp serve --metrics-addr serves the metrics of the calls its MCP client
// makes: the call counter moves by exactly the calls, the frames by
// exactly the count chunks and terminals; the listener closes with the
// command.
func TestMCPServeMetricsAddr(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, hostBin, "mcp", "serve", "--metrics-addr", "127.0.0.1:0", "--", childBin)
	cmd.WaitDelay = 5 * time.Second
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	client := mcp.NewClient(&mcp.Implementation{Name: "metrics-test", Version: "1"}, nil)
	session, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	require.NoError(t, err)
	url := metricsURL(t, stderr)
	const calls, n = 3, 4
	for range calls {
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "count", Arguments: map[string]any{"n": n}})
		require.Falsef(t, err != nil || res.IsError, "tools/call count: %v %+v", err, res)
	}
	// Counted once each call's end event reached the observer.
	completed := map[string]string{"tool": "count", "outcome": "completed", "code": "ok", "synthetic": "false"}
	var fams map[string]*dto.MetricFamily
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		fams = scrape(ctx, t, url)
		if v, _ := counter(fams["skulk_calls_total"], completed); v == calls {
			break
		}
		if time.Now().After(deadline) {
			require.FailNow(t, fmt.Sprintf("skulk_calls_total never reached %d: %v", calls, fams["skulk_calls_total"]))
		}
	}
	if v, ok := counter(fams["skulk_frames_total"], map[string]string{"direction": "provider_to_caller"}); !ok || v != calls*(n+1) {
		assert.Fail(t, fmt.Sprintf("skulk_frames_total{direction=provider_to_caller} = %v, want %d (n chunks and a terminal per call)", v, calls*(n+1)))
	}
	if f := fams["skulk_ping_rtt_seconds"]; f == nil || f.GetType() != dto.MetricType_HISTOGRAM {
		assert.Fail(t, fmt.Sprintf("skulk_ping_rtt_seconds: %v", f))
	}
	if err := session.Close(); err != nil { // closes stdin: mcp serve ends
		require.FailNow(t, fmt.Sprintf("mcp serve did not end cleanly: %v", err))
	}
	listenerClosed(t, url)
}

// bench --metrics-addr serves the metrics while it runs: here it is scraped
// until the bench's calls show, and the listener closes with the command.
func TestBenchMetricsAddr(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, hostBin, "bench", "--json", "--frames", "200000", "--media", "8000000", "--calls", "20000", "--streams", "2",
		"--metrics-addr", "127.0.0.1:0", "--", childBin)
	cmd.WaitDelay = 5 * time.Second
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer cmd.Wait()
	defer cmd.Process.Kill() // a failed test does not wait for the whole bench
	url := metricsURL(t, stderr)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		fams := scrape(ctx, t, url)
		if v, _ := counter(fams["skulk_frames_total"], map[string]string{"direction": "provider_to_caller"}); v > 0 {
			break
		}
		require.False(t, time.Now().After(deadline), "skulk_frames_total never moved during the bench")
	}
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	cmd.Wait()
	listenerClosed(t, url)
}

// A --metrics-addr that is not HOST:PORT is a usage error, and one that
// cannot be listened on fails the command before it starts the child; the
// message names the flag and not the value.
func TestMetricsAddrErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"call", "count", "--metrics-addr", "no-port-here", "--", childBin},
		{"call", "count", "--metrics-addr", "127.0.0.1:http", "--", childBin},
		{"mcp", "serve", "--metrics-addr", "127.0.0.1:99999", "--", childBin},
		{"bench", "--metrics-addr", "[::1", "--", childBin},
	} {
		r := run(t, "", args...)
		assert.Falsef(t, r.Status != cli.ExitUsage || !strings.Contains(r.Stderr, "--metrics-addr must be HOST:PORT") || strings.Contains(r.Stderr, args[len(args)-3]), "%q: status %d, stderr %q; want a usage error naming the flag, not the value", args, r.Status, r.Stderr)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	r := run(t, "", "call", "count", "--metrics-addr", busy.Addr().String(), "--", childBin)
	assert.Falsef(t, r.Status != cli.ExitFailure || !strings.Contains(r.Stderr, "cannot serve --metrics-addr") || strings.Contains(r.Stderr, busy.Addr().String()), "a busy address: status %d, stderr %q", r.Status, r.Stderr)
}

// scrape gets url and parses it as Prometheus text.
func scrape(ctx context.Context, t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Falsef(t, resp.StatusCode != http.StatusOK, "GET %s: %s", url, resp.Status)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err, "/metrics is not Prometheus text")
	return fams
}

// OTEL_TRACES_EXPORTER=console writes the call's spans to stdout; unset,
// nothing is exported.
func TestCallTracesConsole(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(hostBin, "call", "count", "--args", `{"n": 1}`, "--", childBin)
	cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=console")
	out, err := cmd.Output()
	require.NoErrorf(t, err, "call: %v\n%s", err, out)
	for _, want := range []string{`"Name":"count"`, `"rpc.system"`, `"skulk.call.id"`} {
		assert.Falsef(t, !strings.Contains(string(out), want), "stdout lacks %s:\n%s", want, out)
	}
	r := run(t, "", "call", "count", "--args", `{"n": 1}`, "--", childBin)
	assert.Falsef(t, r.Status != 0 || strings.Contains(r.Stdout, "rpc.system"), "without OTEL_TRACES_EXPORTER: status %d, stdout %q", r.Status, r.Stdout)
}
