package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/hostmetrics"
)

// metricsShutdown bounds the wait for scrapes under way when a command
// ends.
const metricsShutdown = 5 * time.Second

// metricsServer serves a host's metrics at /metrics (hostmetrics). Its
// server goroutine is owned by close, which stops and waits for it.
type metricsServer struct {
	metrics *hostmetrics.Metrics
	srv     *http.Server
	wg      sync.WaitGroup
}

// checkMetricsAddr refuses an ADDR that is not HOST:PORT with a numeric
// port, before anything starts. The message does not repeat the value.
func checkMetricsAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		return usageErr("--metrics-addr must be HOST:PORT with a numeric port, such as 127.0.0.1:9464 (port 0 picks a free one)")
	}
	return nil
}

// serveMetrics listens on addr and serves the metrics of the host cfg
// starts (it adds their observer to cfg.CallLog); nil, nil for an empty
// addr. The address it listens on is printed on standard error. Call watch
// once the host started, and close when the command ends.
func serveMetrics(addr string, cfg *host.Config, env Env) (*metricsServer, error) {
	if addr == "" {
		return nil, nil
	}
	if err := checkMetricsAddr(addr); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) && oe.Err != nil {
			err = oe.Err // the cause, without the address
		}
		return nil, statusErr(ExitFailure, "cannot serve --metrics-addr: %v", err)
	}
	s := &metricsServer{metrics: hostmetrics.New()}
	cfg.CallLog.Observers = append(cfg.CallLog.Observers, s.metrics)
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.metrics)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	s.wg.Add(1)
	go func() { // stopped by close (Shutdown); close waits through wg
		defer s.wg.Done()
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(env.Stderr, "skulk-host: metrics server: %v\n", err)
		}
	}()
	fmt.Fprintf(env.Stderr, "skulk-host: metrics on http://%s/metrics\n", ln.Addr())
	return s, nil
}

// watch makes the metrics report h's pool. A nil server does nothing.
func (s *metricsServer) watch(h *host.Host) {
	if s != nil {
		s.metrics.Watch(h)
	}
}

// close stops the server, waiting for its goroutine and for scrapes under
// way (at most metricsShutdown). A nil server does nothing.
func (s *metricsServer) close() {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), metricsShutdown)
	defer cancel()
	if s.srv.Shutdown(ctx) != nil {
		s.srv.Close()
	}
	s.wg.Wait()
}
