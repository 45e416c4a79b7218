package compare

import (
	"context"
)

// calls is the sweeps' sequential small-call point: the compare run's calls
// and unary workloads (Run), every sweep system interleaved round by
// round, recorded as a sweep of one point (the 64-byte payload) so that
// the call targets are ratios of the same run as the others.
func (sw *sweeper) calls(ctx context.Context) (Sweep, error) {
	x := float64(payloadSize)
	rec := newSweepRec("calls", "sequential small calls (the compare run's calls and unary workloads)", "payload", "bytes",
		[]float64{x}, sw.names, sw.log,
		curveSpec(mCall50), curveSpec(mCall99), curveSpec(mUnary50), curveSpec(mUnary99),
		curveSpec{cCall.id, "CPU per call, host + children", "µs", false},
		curveSpec{"call-host-cpu", "host CPU per call", "µs", false},
		curveSpec{"call-child-cpu", "children's CPU per call", "µs", false},
		curveSpec{cUnary.id, "CPU per unary call, host + children", "µs", false},
		curveSpec{"unary-host-cpu", "host CPU per unary call", "µs", false},
		curveSpec{"unary-child-cpu", "children's CPU per unary call", "µs", false},
	)
	// A CPU row's host and children split goes to curves of its own.
	split := map[string][2]string{cCall.id: {"call-host-cpu", "call-child-cpu"}, cUnary.id: {"unary-host-cpu", "unary-child-cpu"}}
	p := sw.p.calls
	rep, err := Run(ctx, Options{Bin: sw.o.Bin, Dir: sw.o.Dir, Systems: sw.names,
		Workloads: []string{"calls", "unary"}, Log: sw.log, sizes: &p})
	if err != nil {
		if ctx.Err() != nil {
			return rec.done(), ctx.Err()
		}
		for _, s := range sw.names { // Run names the system that failed to start
			rec.fail(s, x, err)
		}
		return rec.done(), nil
	}
	for _, m := range rep.Metrics {
		if _, ok := rec.vals[m.ID]; !ok {
			continue // a row the sweep does not chart
		}
		ids, samples := []string{m.ID}, func(f *Figure) [][]float64 { return [][]float64{f.Samples} }
		if sp, ok := split[m.ID]; ok {
			ids = append(ids, sp[0], sp[1])
			samples = func(f *Figure) [][]float64 { return [][]float64{f.Samples, f.HostCPUSamples, f.ChildCPUSamples} }
		}
		for _, f := range m.Figures {
			for i, id := range ids {
				switch {
				case f.NA != "" || f.Err != "": // the run's own words, as they were recorded
					v := rec.val(id, f.System, x)
					v.NA, v.Err = f.NA, f.Err
				default:
					for _, y := range samples(f)[i] {
						rec.set(id, f.System, x, y)
					}
				}
			}
		}
	}
	return rec.done(), ctx.Err()
}
