package compare

import (
	"context"
	"fmt"
	"time"
)

// pairDeadline bounds a Pair run whose context has no deadline.
const pairDeadline = time.Hour

// PairOptions configures Pair.
type PairOptions struct {
	// Children are the Skulk child binaries to compare, two or more: each
	// gets a host of its own in this process.
	Children []string
	// Dir is a directory for the hosts' sockets; it must exist.
	Dir string
	// Rounds is how many times every child gets a block of each workload
	// (default 40); Block is the calls per block (default 300), of which
	// the first tenth warms up and is not timed.
	Rounds, Block int
}

// PairResult is one child's latencies for one call shape.
type PairResult struct {
	Child string // the binary
	Shape string // "call" (echo of a chunk, the compare run's small call) or "unary"
	// P25, P50 and P75 are quartiles of the timed calls.
	P25, P50, P75 time.Duration
	Calls         int // calls timed
}

// Pair measures the small and the unary call of the compare run against
// several builds of a Skulk child at once: one host per child in this
// process, blocks of calls alternating between them round by round. A
// change to the child is then measured under the same load as the build
// it changes, which runs of separate benchmark binaries, minutes apart on
// a shared machine, do not give (docs/performance.md). Calls carry a
// deadline, as the compare run's do: ctx's, or pairDeadline from now when
// ctx has none.
func Pair(ctx context.Context, o PairOptions) ([]PairResult, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, pairDeadline)
		defer cancel()
	}
	if len(o.Children) < 2 {
		return nil, fmt.Errorf("compare: pair: %d children, want two or more", len(o.Children))
	}
	if o.Rounds <= 0 {
		o.Rounds = 40
	}
	if o.Block <= 0 {
		o.Block = 300
	}
	warm := o.Block / 10
	type variant struct {
		n    int // the child's place in o.Children, from 1
		res  PairResult
		call func(context.Context) error
		ds   []time.Duration
	}
	var vs []*variant
	for i, bin := range o.Children {
		ss, err := (&skulkSystem{sys: Skulk, bin: bin, dir: o.Dir}).start(ctx)
		if err != nil {
			return nil, fmt.Errorf("compare: pair: child %d: %w", i+1, err)
		}
		defer ss.close()
		if !ss.hasReply {
			return nil, fmt.Errorf("compare: pair: child %d: %w", i+1, notApplicable("the child has no unary tool"))
		}
		vs = append(vs,
			&variant{n: i + 1, res: PairResult{Child: bin, Shape: "call"}, call: ss.call},
			&variant{n: i + 1, res: PairResult{Child: bin, Shape: "unary"}, call: ss.unary})
	}
	for range o.Rounds {
		for _, v := range vs {
			for i := range o.Block {
				t0 := time.Now()
				if err := v.call(ctx); err != nil {
					return nil, fmt.Errorf("compare: pair: child %d, %s call: %w", v.n, v.res.Shape, err)
				}
				if i >= warm {
					v.ds = append(v.ds, time.Since(t0))
				}
			}
		}
	}
	out := make([]PairResult, len(vs))
	for i, v := range vs {
		v.res.P25, v.res.P50, v.res.P75 = percentile(v.ds, 0.25), percentile(v.ds, 0.5), percentile(v.ds, 0.75)
		v.res.Calls = len(v.ds)
		out[i] = v.res
	}
	return out, nil
}
