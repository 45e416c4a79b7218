package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/skulkrt/skulk/host"
)

// telemetryFlags are the flags of a command that can export telemetry.
type telemetryFlags struct {
	metricsAddr string
}

func (f *telemetryFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "")
}

// telemetry is what a command serves and exports: /metrics on
// --metrics-addr (metricsServer, nil without it), and spans when
// OTEL_TRACES_EXPORTER asks for them (tracing.go).
type telemetry struct {
	metrics *metricsServer
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
	if t.metrics, err = serveMetrics(f.metricsAddr, cfg, env); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

// watch makes the metrics report h's pool.
func (t *telemetry) watch(h *host.Host) { t.metrics.watch(h) }

// close stops the metrics server (waiting for its goroutine) and flushes
// the spans.
func (t *telemetry) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	t.metrics.close()
	if t.tp != nil {
		if err := t.tp.Shutdown(ctx); err != nil {
			fmt.Fprintf(t.stderr, "skulk-host: spans not exported: %v\n", err)
		}
	}
}
