package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The standard OpenTelemetry variables that choose the trace exporter.
// The OTLP exporters read the rest of OTEL_EXPORTER_OTLP_* themselves
// (endpoint, headers, timeout, compression, certificates), and the SDK
// reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
const (
	// tracesExporterEnv turns trace export on: a comma-separated list of
	// otlp and console; "none" or unset means off.
	tracesExporterEnv = "OTEL_TRACES_EXPORTER"
	// otlpTracesProtocolEnv, or else otlpProtocolEnv, is the OTLP
	// transport: http/protobuf (the default) or grpc.
	otlpTracesProtocolEnv = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	otlpProtocolEnv       = "OTEL_EXPORTER_OTLP_PROTOCOL"
)

// errTraceConfig is matched by every error of a trace export setting; the
// message names the variable, never its value (headers may hold secrets).
var errTraceConfig = errors.New("trace export configuration")

// newTracerProvider returns the SDK provider the environment asks for,
// with service.name set to service unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES say otherwise, or nil when it asks for none.
// console writes spans as JSON lines to stdout, synchronously; otlp batches
// them. The caller must Shutdown the provider: that flushes the batch.
func newTracerProvider(ctx context.Context, service string, stdout io.Writer) (*sdktrace.TracerProvider, error) {
	v := strings.TrimSpace(os.Getenv(tracesExporterEnv))
	if v == "" || v == "none" {
		return nil, nil
	}
	var opts []sdktrace.TracerProviderOption
	for name := range strings.SplitSeq(v, ",") {
		switch strings.TrimSpace(name) {
		case "console":
			e, err := stdouttrace.New(stdouttrace.WithWriter(stdout))
			if err != nil {
				return nil, err
			}
			opts = append(opts, sdktrace.WithSyncer(e))
		case "otlp":
			e, err := newOTLPExporter(ctx)
			if err != nil {
				return nil, err
			}
			opts = append(opts, sdktrace.WithBatcher(e))
		default:
			return nil, configError(tracesExporterEnv + " must be otlp, console or none (or a comma-separated list of otlp and console)")
		}
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithFromEnv(), // later detectors win: the environment's service.name over ours
	)
	if err != nil && res == nil {
		return nil, err
	}
	// A partial resource (an OTEL_RESOURCE_ATTRIBUTES entry that does not
	// parse) is still used, as the SDK's own default does.
	return sdktrace.NewTracerProvider(append(opts, sdktrace.WithResource(res))...), nil
}

// newOTLPExporter returns the OTLP span exporter of the protocol the
// environment names. Neither exporter connects before its first export.
func newOTLPExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	name, proto := otlpTracesProtocolEnv, os.Getenv(otlpTracesProtocolEnv)
	if proto == "" {
		name, proto = otlpProtocolEnv, os.Getenv(otlpProtocolEnv)
	}
	switch proto {
	case "", "http/protobuf":
		return otlptracehttp.New(ctx)
	case "grpc":
		return otlptracegrpc.New(ctx)
	}
	return nil, configError(name + " must be http/protobuf or grpc")
}

// configError is a trace setting's error with the message msg.
func configError(msg string) error { return &traceConfigError{msg} }

type traceConfigError struct{ msg string }

func (e *traceConfigError) Error() string { return e.msg }
func (e *traceConfigError) Is(target error) bool {
	return target == errTraceConfig
}
