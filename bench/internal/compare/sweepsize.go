package compare

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skulkrt/skulk/bench/internal/cpuacct"
	"github.com/skulkrt/skulk/bench/internal/mcpbench"
)

// maxSweepBytes bounds the bytes of one frame-size measurement, whatever
// the calibration says: 4 GiB.
const maxSweepBytes = 4 << 30

func (sw *sweeper) frameSize(ctx context.Context) (Sweep, error) {
	p := sw.p
	rec := newSweepRec("frame-size", "one stream of chunks child→host, by chunk size", "chunk size", "bytes",
		floats(p.sizes), sw.names, sw.log,
		curveSpec{"throughput", "throughput", "MB/s", true},
		curveSpec{"frames", "chunks per second", "chunks/s", true},
		curveSpec{"cpu-per-mib", "CPU per MiB, host + children", "ms", false},
		curveSpec{"host-cpu-per-mib", "host CPU per MiB", "ms", false},
		curveSpec{"child-cpu-per-mib", "children's CPU per MiB", "ms", false},
	)
	sessions := make([]streamerOrRaw, len(sw.systems))
	defer func() {
		for _, s := range sessions {
			if s != nil {
				s.close()
			}
		}
	}()
	for i, s := range sw.systems {
		sctx, cancel := context.WithTimeout(ctx, p.timeout)
		sess, err := s.open(sctx)
		cancel()
		if err != nil {
			for _, size := range p.sizes {
				rec.fail(s.name(), float64(size), err)
			}
			continue
		}
		sessions[i] = sess.(streamerOrRaw)
	}
	counts := map[[2]int]int{} // (system, size) → chunks of one measurement
	for range p.rounds {
		for _, size := range p.sizes {
			for i, s := range sw.systems {
				x := float64(size)
				if sessions[i] == nil || rec.failed(s.name(), x) || ctx.Err() != nil {
					continue
				}
				if s.name() == "mcp" && size > mcpbench.MaxBlob {
					rec.fail(s.name(), x, notApplicable(fmt.Sprintf("an MCP blob travels as base64 in one JSON line, and the stdio transport's line limit (16 MiB) holds at most %d MiB of it", mcpbench.MaxBlob>>20)))
					continue
				}
				pctx, cancel := context.WithTimeout(ctx, p.timeout)
				err := sw.sizePoint(pctx, rec, s.name(), sessions[i], size, counts, i)
				cancel()
				if err != nil {
					rec.fail(s.name(), x, err)
				}
			}
		}
	}
	return rec.done(), ctx.Err()
}

// streamerOrRaw is what the frame-size sweep needs of a session: media and
// its children's pids.
type streamerOrRaw interface {
	session
	pids() []int
}

func (sw *sweeper) sizePoint(ctx context.Context, rec *sweepRec, name string, sess streamerOrRaw, size int, counts map[[2]int]int, i int) error {
	key := [2]int{i, size}
	n := counts[key]
	if n == 0 {
		// Calibrate (and warm up) with about 1 MiB (2 to 256 chunks), and
		// four times as many chunks until a run lasts an eighth of the
		// target: a call's own cost (the invoke, the end) must not set
		// the count, or fast small chunks get a window of milliseconds,
		// shorter than the 10 ms tick the children's CPU is read in.
		n0 := min(max(2, (1<<20)/size), 256)
		var wall time.Duration
		for {
			m, err := cpuacct.Start(sess.pids()...)
			if err != nil {
				return err
			}
			if err := sess.media(ctx, n0, size); err != nil {
				return fmt.Errorf("calibration: %w", err)
			}
			u, err := m.Stop()
			if err != nil {
				return err
			}
			wall = u.Wall
			if wall >= sw.p.target/8 || 4*n0 > maxSweepBytes/size {
				break
			}
			n0 *= 4
		}
		n = int(float64(n0) * sw.p.target.Seconds() / max(wall.Seconds(), 1e-6))
		n = min(max(n, 2), maxSweepBytes/size)
		counts[key] = n
	}
	m, err := cpuacct.Start(sess.pids()...)
	if err != nil {
		return err
	}
	if err := sess.media(ctx, n, size); err != nil {
		return err
	}
	u, err := m.Stop()
	if err != nil {
		return err
	}
	if u.Wall <= 0 {
		return errors.New("no time passed")
	}
	x, bytes := float64(size), float64(n)*float64(size)
	mib := bytes / (1 << 20)
	rec.set("throughput", name, x, bytes/u.Wall.Seconds()/1e6)
	rec.set("frames", name, x, float64(n)/u.Wall.Seconds())
	rec.set("cpu-per-mib", name, x, ms(u.Total())/mib)
	rec.set("host-cpu-per-mib", name, x, ms(u.Host)/mib)
	rec.set("child-cpu-per-mib", name, x, ms(u.Children)/mib)
	fmt.Fprintf(sw.log, "  %-12s %-10s %-9d %.4g MB/s, %.3g ms CPU/MiB (%d chunks)\n", "frame-size", name, size,
		bytes/u.Wall.Seconds()/1e6, ms(u.Total())/mib, n)
	return nil
}
