//go:build linux

package contain

import (
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkStart: one op is /bin/true started through a Set (timed: the
// child's cgroups made, the v1 ones joined, the fork and exec) and then
// waited for, swept and released (reported as end-ns/op): what a child's
// containment costs, with a cgroup, without, and with memory and pids
// limits (on a hybrid machine the starter thread joins the v1 cgroups for
// the fork). BenchmarkNew is a Set's own setup and Close.
// SKULK_BENCH_ORDER=reverse runs the cases in the other order.
//
//	go test -run '^$' -bench . -count 6 ./host/internal/contain/
func BenchmarkStart(b *testing.B) {
	cases := []struct {
		name string
		opts Options
	}{
		{"no-cgroup", Options{NoCgroups: true}},
		{"cgroup", Options{}},
		{"cgroup-limits", Options{Limits: Limits{MemoryBytes: 1 << 30, Pids: 1000}}},
	}
	if os.Getenv("SKULK_BENCH_ORDER") == "reverse" {
		slices.Reverse(cases)
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			s, err := New(tc.opts, slog.New(slog.DiscardHandler))
			if err != nil {
				b.Skip(err)
			}
			defer s.Close()
			if !tc.opts.NoCgroups && !s.Status().Cgroups {
				b.Skip(s.Status().Unavailable)
			}
			i := 0
			var end time.Duration
			for b.Loop() {
				i++
				cmd := exec.Command("/bin/true")
				ch, err := s.Start(cmd, "c"+strconv.Itoa(i), nil)
				require.NoError(b, err)
				b.StopTimer()
				t0 := time.Now()
				cmd.Wait()
				ch.Sweep()
				err = ch.Release()
				end += time.Since(t0)
				b.StartTimer()
				require.NoError(b, err)
			}
			b.ReportMetric(float64(end.Nanoseconds())/float64(b.N), "end-ns/op")
		})
	}
}

func BenchmarkNew(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"no-cgroup", Options{NoCgroups: true}},
		{"cgroup", Options{}},
		{"cgroup-limits", Options{Limits: Limits{MemoryBytes: 1 << 30, Pids: 1000}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				s, err := New(tc.opts, slog.New(slog.DiscardHandler))
				if err != nil {
					b.Skip(err)
				}
				s.Close()
			}
		})
	}
}
