package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/hostmetrics"
)

// tracesExporterEnv is the standard OpenTelemetry variable that turns trace
// export on; "console" (spans as JSON on stdout) is what skulk-host
// supports, "none" or unset means off.
const tracesExporterEnv = "OTEL_TRACES_EXPORTER"

// telemetryFlags are the flags of a command that can export telemetry.
type telemetryFlags struct {
	metricsAddr string
}

func (f *telemetryFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "")
}

// telemetry is what a command serves and exports: /metrics on
// --metrics-addr, and spans when OTEL_TRACES_EXPORTER asks for them. Its
// server goroutine is owned by close, which stops and waits for it.
type telemetry struct {
	metrics *hostmetrics.Metrics
	srv     *http.Server
	wg      sync.WaitGroup
	tp      *sdktrace.TracerProvider
}

// startTelemetry sets cfg up for what f and the environment ask for and
// starts the metrics server; nothing at all when they ask for nothing.
func startTelemetry(f *telemetryFlags, cfg *host.Config, env Env) (*telemetry, error) {
	t := &telemetry{}
	switch exp := os.Getenv(tracesExporterEnv); exp {
	case "", "none":
	case "console":
		e, err := stdouttrace.New(stdouttrace.WithWriter(env.Stdout))
		if err != nil {
			return nil, statusErr(ExitFailure, "cannot export traces: %v", err)
		}
		t.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(e))
		cfg.TracerProvider = t.tp
	default:
		return nil, usageErr(tracesExporterEnv + " must be console or none")
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
		t.tp.Shutdown(ctx)
	}
}
