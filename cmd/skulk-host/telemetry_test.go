package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// A call run with --metrics-addr serves /metrics while it runs, in the
// Prometheus text format: the call in flight and the child ready.
func TestCallMetricsAddr(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, hostBin, "call", "upper", "--input", "-", "--metrics-addr", "127.0.0.1:0", "--", childBin)
	cmd.WaitDelay = 5 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout strings.Builder
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
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
		t.Fatalf("no metrics address on stderr: %v", sc.Err())
	}
	go io.Copy(io.Discard, stderr) // the rest of stderr, until the command exits
	if _, err := io.WriteString(stdin, "hello\n"); err != nil {
		t.Fatal(err)
	}

	// The server is up before the child: until the host started, a scrape
	// has only the call counters.
	var fams map[string]*dto.MetricFamily
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		fams = scrape(ctx, t, url)
		if f := fams["skulk_calls_in_flight"]; f != nil && f.GetMetric()[0].GetGauge().GetValue() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("skulk_calls_in_flight never 1: %v", fams["skulk_calls_in_flight"])
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
		t.Errorf("skulk_child_state{state=\"ready\"} is not 1: %v", fams["skulk_child_state"])
	}
	for _, name := range []string{"skulk_child_restarts_total", "skulk_child_stuck_handlers"} {
		if fams[name] == nil {
			t.Errorf("%s missing", name)
		}
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("call: %v", err)
	}
	if !strings.Contains(stdout.String(), "HELLO") {
		t.Errorf("stdout %q lacks the call's output", stdout.String())
	}
}

// scrape gets url and parses it as Prometheus text.
func scrape(ctx context.Context, t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics is not Prometheus text: %v", err)
	}
	return fams
}

// OTEL_TRACES_EXPORTER=console writes the call's spans to stdout; unset,
// nothing is exported.
func TestCallTracesConsole(t *testing.T) {
	cmd := exec.Command(hostBin, "call", "count", "--args", `{"n": 1}`, "--", childBin)
	cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=console")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("call: %v\n%s", err, out)
	}
	for _, want := range []string{`"Name":"count"`, `"rpc.system"`, `"skulk.call.id"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("stdout lacks %s:\n%s", want, out)
		}
	}
	r := run(t, "", "call", "count", "--args", `{"n": 1}`, "--", childBin)
	if r.status != 0 || strings.Contains(r.stdout, "rpc.system") {
		t.Errorf("without OTEL_TRACES_EXPORTER: status %d, stdout %q", r.status, r.stdout)
	}
}
