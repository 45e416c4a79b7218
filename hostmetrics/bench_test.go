package hostmetrics_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/hostmetrics"
	"github.com/skulkrt/skulk/skulktest"
)

// What metrics cost a host: the same calls against two hosts of the real
// cmd/skulk-child in one run, one without metrics and one with a Metrics
// observing its call log and registered (as --metrics-addr does), each
// sub-benchmark run in turn, so that both see the same load. Compare the
// columns with benchstat:
//
//	go test -run '^$' -bench Metrics -count 8 ./hostmetrics | tee m.txt
//	benchstat -col /metrics m.txt
func BenchmarkMetrics(b *testing.B) {
	bin := skulktest.Build(b, "github.com/skulkrt/skulk/cmd/skulk-child")
	// Started here rather than by skulktest.StartHost, whose clean-up
	// checks of one would count the other's goroutines.
	start := func(cfg host.Config) *host.Host {
		cfg.Command = bin
		h, err := host.Start(context.Background(), cfg)
		require.NoError(b, err)
		b.Cleanup(func() { h.Close(context.Background()) })
		return h
	}
	off := start(host.Config{})
	m := hostmetrics.New()
	on := start(host.Config{CallLog: calllog.Options{Observers: []calllog.Observer{m}}})
	m.Watch(on)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	hosts := []struct {
		name string
		h    *host.Host
	}{{"off", off}, {"on", on}}

	// One op is one call of count n=1, read to its end.
	one := frame.MustPayload(map[string]any{"n": 1})
	for _, hh := range hosts {
		b.Run("calls/metrics="+hh.name, func(b *testing.B) {
			cpu := hostCPU(b)
			for b.Loop() {
				c, err := hh.h.Call(context.Background(), "count", one, host.WithInput())
				require.NoError(b, err)
				if _, err := c.Wait(); err != nil {
					require.FailNow(b, fmt.Sprint(err))
				}
			}
			b.ReportMetric(float64(hostCPU(b)-cpu)/float64(b.N), "host-cpu-ns/op")
		})
	}
	// One op is one frame of a count call of 10,000 small chunks.
	const n = 10_000
	many := frame.MustPayload(map[string]any{"n": n})
	for _, hh := range hosts {
		b.Run("small-stream/metrics="+hh.name, func(b *testing.B) {
			cpu := hostCPU(b)
			for i := 0; i < b.N; i += n {
				c, err := hh.h.Call(context.Background(), "count", many, host.WithInput())
				require.NoError(b, err)
				if _, err := c.Wait(); err != nil {
					require.FailNow(b, fmt.Sprint(err))
				}
			}
			b.ReportMetric(float64(hostCPU(b)-cpu)/float64(b.N), "host-cpu-ns/op")
		})
	}
	require.NoError(b, on.FlushObservers(context.Background()))
	if _, err := reg.Gather(); err != nil {
		require.FailNow(b, fmt.Sprint(err))
	}
}

// hostCPU returns the CPU time this process has used, user and system, in
// nanoseconds.
func hostCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return ru.Utime.Nano() + ru.Stime.Nano()
}
