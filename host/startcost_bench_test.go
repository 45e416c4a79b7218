package host

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
)

// BenchmarkStartToFirstCall: one op is a Host with one cmd/skulk-child
// started and a count call of one chunk completed, timed from Start to
// the call's result; Close is not timed. The cases differ in the child's
// containment: a cgroup per child (the default), none (NoCgroups), and a
// cgroup with memory and pids limits (on a hybrid machine the starter
// thread joins the v1 memory and pids cgroups for the fork). The cost of a
// cgroup is the difference (docs/performance.md, "A cgroup per child");
// SKULK_BENCH_ORDER=reverse runs the cases in the other order. Besides the
// wall time it reports child-cpu-ns/op, the CPU time (user and system) of
// each child over its whole life, start, first call and Close, as the
// kernel counts it for reaped children: steadier than the wall time on a
// loaded machine.
//
//	go test -run '^$' -bench StartToFirstCall -benchtime 200x -count 6 ./host/
func BenchmarkStartToFirstCall(b *testing.B) {
	cases := []struct {
		name string
		set  func(*Config)
	}{
		{"cgroup", func(*Config) {}},
		{"no-cgroup", func(c *Config) { c.NoCgroups = true }},
		{"cgroup-limits", func(c *Config) { c.MemoryMax, c.PidsMax = 1<<30, 1000 }},
	}
	if os.Getenv("SKULK_BENCH_ORDER") == "reverse" {
		slices.Reverse(cases)
	}
	args := frame.MustPayload(map[string]any{"n": 1})
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			cfg := realConfig()
			cfg.TempDir = b.TempDir()
			tc.set(&cfg)
			cpu0 := childrenCPU(b)
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				h, err := Start(ctx, cfg)
				if err != nil {
					cancel()
					require.FailNow(b, fmt.Sprint(err))
				}
				if tc.name != "no-cgroup" && !h.Stats().Cgroups {
					cancel()
					h.Close(context.Background())
					b.Skipf("no cgroups here: %s", h.Stats().CgroupsUnavailable)
				}
				c, err := h.Call(ctx, "count", args)
				if err == nil {
					_, err = c.Wait()
				}
				b.StopTimer()
				cancel()
				h.Close(context.Background())
				require.NoError(b, err)
				b.StartTimer()
			}
			b.ReportMetric(float64(childrenCPU(b)-cpu0)/float64(b.N), "child-cpu-ns/op")
		})
	}
}

// childrenCPU is the CPU time, in nanoseconds, of this process's children
// that have been reaped: Close reaps a Host's child before it returns.
func childrenCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru))
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkFreshChildIdle: one op is a Host with one cmd/skulk-child (no
// cgroup) started, a count call of one chunk completed, and then two
// seconds of nothing. It reports the child's CPU in the first second after
// that call (first-s-child-cpu-ns/op) and in the second after
// (second-s-child-cpu-ns/op), read from /proc/PID/task/*/schedstat, which
// counts in nanoseconds: what a fresh child costs in the pool sweep's idle
// window, the second after its start and first call (docs/performance.md,
// "Idle CPU"). The time per op is mostly the two seconds of waiting.
//
//	go test -run '^$' -bench FreshChildIdle -benchtime 20x ./host/
func BenchmarkFreshChildIdle(b *testing.B) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		b.Skip("no /proc/PID/task here")
	}
	args := frame.MustPayload(map[string]any{"n": 1})
	cfg := realConfig()
	cfg.TempDir = b.TempDir()
	cfg.NoCgroups = true
	var first, second time.Duration
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		h, err := Start(ctx, cfg)
		if err != nil {
			cancel()
			require.FailNow(b, fmt.Sprint(err))
		}
		c, err := h.Call(ctx, "count", args)
		if err == nil {
			_, err = c.Wait()
		}
		var cpu [3]time.Duration
		if err == nil {
			pid := h.Children()[0].PID
			t0 := time.Now()
			for i := range cpu {
				time.Sleep(time.Until(t0.Add(time.Duration(i) * time.Second)))
				if cpu[i], err = threadsCPU(pid); err != nil {
					break
				}
			}
		}
		cancel()
		h.Close(context.Background())
		require.NoError(b, err)
		first += cpu[1] - cpu[0]
		second += cpu[2] - cpu[1]
	}
	b.ReportMetric(float64(first.Nanoseconds())/float64(b.N), "first-s-child-cpu-ns/op")
	b.ReportMetric(float64(second.Nanoseconds())/float64(b.N), "second-s-child-cpu-ns/op")
}

// threadsCPU is the CPU time the threads of process pid have spent
// running, the first field of each /proc/PID/task/TID/schedstat.
func threadsCPU(pid int) (time.Duration, error) {
	tasks, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/schedstat")
	if err != nil || len(tasks) == 0 {
		return 0, fmt.Errorf("no threads of %d in /proc: %v", pid, err)
	}
	var sum int64
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(data))
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", t, err)
		}
		sum += ns
	}
	return time.Duration(sum), nil
}
