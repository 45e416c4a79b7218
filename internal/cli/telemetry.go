package cli

import (
	"context"
	"flag"
	"os"
	"time"

	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/skulkrt/skulk/host"
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
// --metrics-addr (metricsServer, nil without it), and spans when
// OTEL_TRACES_EXPORTER asks for them.
type telemetry struct {
	metrics *metricsServer
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
	var err error
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
		t.tp.Shutdown(ctx)
	}
}
