package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/hostmetrics"
)

// telemetryFlags are the flags of a command that can export telemetry.
type telemetryFlags struct {
	metricsAddr string
}

func (f *telemetryFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "")
}

// telemetry is what a command serves and exports: /metrics on
// --metrics-addr, and spans when OTEL_TRACES_EXPORTER asks for them
// (tracing.go). Its server goroutine is owned by close, which stops and
// waits for it.
type telemetry struct {
	metrics *hostmetrics.Metrics
	srv     *http.Server
	wg      sync.WaitGroup
	tp      *sdktrace.TracerProvider
	stderr  io.Writer // where close reports spans it could not export
}

// startTelemetry sets cfg up for what f and the environment ask for and
// starts the metrics server; nothing at all when they ask for nothing.
func startTelemetry(f *telemetryFlags, cfg *host.Config, env Env) (*telemetry, error) {
	t := &telemetry{stderr: env.Stderr}
	tp, err := newTracerProvider(context.Background(), "skulk-host", env.Stdout)
	if errors.Is(err, errTraceConfig) {
		return nil, usageErr("%v", err)
	} else if err != nil {
		return nil, statusErr(ExitFailure, "cannot export traces: %v", err)
	}
	if tp != nil {
		t.tp = tp
		cfg.TracerProvider = tp
	}
	if f.metricsAddr == "" {
		return t, nil
	}
	ln, err := net.Listen("tcp", f.metricsAddr)
	if err != nil {
		t.close()
		return nil, statusErr(ExitFailure, "cannot serve --metrics-addr: %v", err)
	}
	t.metrics = hostmetrics.New()
	cfg.CallLog.Observers = append(cfg.CallLog.Observers, t.metrics)
	reg := prometheus.NewRegistry()
	reg.MustRegister(t.metrics)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		if err := t.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(env.Stderr, "skulk-host: metrics server: %v\n", err)
		}
	}()
	fmt.Fprintf(env.Stderr, "skulk-host: metrics on http://%s/metrics\n", ln.Addr())
	return t, nil
}

// watch makes the metrics report h's pool.
func (t *telemetry) watch(h *host.Host) {
	if t.metrics != nil {
		t.metrics.Watch(h)
	}
}

// close stops the metrics server (waiting for its goroutine) and flushes
// the spans.
func (t *telemetry) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if t.srv != nil {
		t.srv.Shutdown(ctx)
		t.wg.Wait()
	}
	if t.tp != nil {
		if err := t.tp.Shutdown(ctx); err != nil {
			fmt.Fprintf(t.stderr, "skulk-host: spans not exported: %v\n", err)
		}
	}
}
