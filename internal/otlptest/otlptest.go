// Package otlptest is an OTLP/HTTP trace receiver for tests: an
// httptest server that decodes what OpenTelemetry exporters post to
// /v1/traces (protobuf) and keeps the spans, so that a test can check
// what a real process exported.
package otlptest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// maxRequest bounds the body of one export request read (4 MiB, the
// exporters' batches are far smaller).
const maxRequest = 4 << 20

// Collector receives OTLP/HTTP protobuf trace exports. Its methods are
// safe for concurrent use; the test's cleanup closes its server.
type Collector struct {
	srv *httptest.Server

	mu      sync.Mutex
	spans   []Span
	headers map[string]http.Header // by service.name: the last request's
}

// Span is a received span with the service.name of its resource.
type Span struct {
	Service string
	*tracepb.Span
}

// New starts a Collector, closed when t's test ends.
func New(t testing.TB) *Collector {
	c := &Collector{headers: make(map[string]http.Header)}
	c.srv = httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(c.srv.Close)
	return c
}

// URL is the base URL to give as OTEL_EXPORTER_OTLP_ENDPOINT.
func (c *Collector) URL() string { return c.srv.URL }

// Env returns the variables that make a process export its spans to c
// over OTLP/HTTP.
func (c *Collector) Env() []string {
	return []string{"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_ENDPOINT=" + c.srv.URL}
}

func (c *Collector) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want a POST of protobuf to /v1/traces", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequest))
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	if err != nil {
		http.Error(w, "not an ExportTraceServiceRequest", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		service := Attr(rs.GetResource().GetAttributes(), "service.name").GetStringValue()
		c.headers[service] = r.Header.Clone()
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, Span{service, s})
			}
		}
	}
	c.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// Spans returns the spans received so far, in the order they came.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Headers returns the HTTP headers of the last request that carried spans
// of service; nil when none did.
func (c *Collector) Headers(service string) http.Header {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.headers[service]
}

// Attr returns the value of the attribute key, or nil.
func Attr(kvs []*commonpb.KeyValue, key string) *commonpb.AnyValue {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue()
		}
	}
	return nil
}
