package compare

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/skulkrt/skulk/bench/internal/cpuacct"
	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/sqlitestore"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/internal/replay"
)

// callEvents are the events of a count call besides its output events:
// started, request and done.
const callEvents = 3

func (sw *sweeper) journal(ctx context.Context) (Sweep, error) {
	p := sw.p
	x := float64(p.journalEvents)
	rec := newSweepRec("journal", "the call log: one call's events in a best-effort SQLite journal", "events", "events",
		[]float64{x}, sw.names, sw.log,
		curveSpec{"keep-pct", "events kept, default queue (65,536)", "%", true},
		curveSpec{"call-rate", "call's frames/s with the journal, default queue", "frames/s", true},
		curveSpec{"keep-rate", "events kept per second, queue holding the whole call", "events/s", true},
		curveSpec{"cpu-per-event", "CPU per kept event, host + child", "µs", false},
		curveSpec{"replay-rate", "replay (read back + rebuild, as skulk-host replay)", "events/s", true},
		curveSpec{"follow-rate", "follower catch-up from the start", "events/s", true},
		curveSpec{"bytes-per-event", "bytes on disk per event", "bytes", false},
	)
	for _, s := range sw.systems {
		ss, ok := s.(*skulkSystem)
		if !ok {
			rec.fail(s.name(), x, notApplicable(s.name()+" has no call log"))
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 2*p.timeout)
		err := sw.journalPoint(pctx, rec, ss, p.journalEvents)
		cancel()
		if err != nil {
			rec.fail(s.name(), x, err)
		}
	}
	return rec.done(), ctx.Err()
}

// journalRun is one call of n chunks with a best-effort SQLite journal
// whose queue holds queue events (0: the default).
type journalRun struct {
	path    string
	st      *sqlitestore.Store
	tree    string
	kept    int
	last    uint64        // the Seq of the last event kept
	took    time.Duration // from the call's start to the host's Close returned
	callDur time.Duration // from the call's start to its end
	use     cpuacct.Usage
}

func (sw *sweeper) journalCall(ctx context.Context, ss *skulkSystem, name string, chunks, queue int) (*journalRun, error) {
	dir, err := os.MkdirTemp(sw.o.Dir, "journal-*")
	if err != nil {
		return nil, err
	}
	jr := &journalRun{path: filepath.Join(dir, "calls.db")}
	jr.st, err = sqlitestore.Open(jr.path)
	if err != nil {
		return nil, err
	}
	j := &calllog.Journal{Store: jr.st, Queue: queue}
	if queue > 0 {
		// A queue meant to hold the whole call holds it in bytes too
		// (a count event's content is 64 bytes, well under 1 KiB with
		// its ids and fixed cost); Close waits for it to be kept (below).
		j.QueueBytes = int64(queue) << 10
	}
	h, err := host.Start(ctx, host.Config{Command: ss.bin, ExtraEnv: ss.env, TempDir: ss.dir,
		CallLog: calllog.Options{Journal: j}})
	if err != nil {
		jr.st.Close()
		return nil, err
	}
	m, err := cpuacct.Start((&skulkSession{h: h}).pids()...)
	if err != nil {
		h.Close(ctx)
		jr.st.Close()
		return nil, err
	}
	self0, err := cpuacct.Self()
	if err != nil {
		h.Close(ctx)
		jr.st.Close()
		return nil, err
	}
	t0 := time.Now()
	c, err := h.Call(ctx, "count", frame.MustPayload(map[string]any{"n": chunks, "size": countPad}))
	if err == nil {
		var got int
		got, _, err = drain(ctx, c)
		if err == nil && got != chunks {
			err = fmt.Errorf("got %d chunks, want %d", got, chunks)
		}
	}
	jr.callDur = time.Since(t0)
	u, merr := m.Stop() // before Close stops the child; the host's CPU after it is counted below
	// Close waits for the journal to keep the queue as long as its
	// context allows: a whole-call queue takes tens of seconds.
	closeCtx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	cerr := h.Close(closeCtx)
	cancel()
	jr.took = time.Since(t0)
	self1, serr := cpuacct.Self()
	if err := errors.Join(err, merr, cerr, serr); err != nil {
		jr.st.Close()
		return nil, err
	}
	jr.use = u
	jr.use.Host = self1 - self0 // with the journal's writing after the call ended
	trees, err := jr.st.Trees(ctx)
	if err != nil || len(trees) != 1 {
		jr.st.Close()
		return nil, fmt.Errorf("the store holds %d trees, want 1: %v", len(trees), err)
	}
	jr.tree = trees[0]
	for after := uint64(0); ; {
		evs, err := jr.st.EventsAfter(ctx, jr.tree, after, 4096)
		if err != nil {
			jr.st.Close()
			return nil, err
		}
		if len(evs) == 0 {
			break
		}
		jr.kept += len(evs)
		after = evs[len(evs)-1].Seq
		jr.last = after
	}
	return jr, nil
}

func (sw *sweeper) journalPoint(ctx context.Context, rec *sweepRec, ss *skulkSystem, events int) error {
	name, x := ss.name(), float64(events)
	chunks := events - callEvents
	// A queue for every event: the journal's own rate. Middle events
	// (the chunks) may fill only three quarters of a journal's queue, so
	// the queue is twice the call.
	b, err := sw.journalCall(ctx, ss, name, chunks, 2*events+1024)
	if err != nil {
		return fmt.Errorf("whole-call queue: %w", err)
	}
	defer b.st.Close()
	if b.kept != int(b.last) {
		return fmt.Errorf("a queue holding the whole call kept %d of %d events", b.kept, b.last)
	}
	// The default queue: a call faster than the store drops what the
	// queue cannot hold.
	a, err := sw.journalCall(ctx, ss, name, chunks, 0)
	if err != nil {
		return fmt.Errorf("default queue: %w", err)
	}
	a.st.Close()
	rec.set("keep-pct", name, x, 100*float64(a.kept)/float64(b.kept))
	rec.set("call-rate", name, x, float64(chunks)/a.callDur.Seconds())
	rec.set("keep-rate", name, x, float64(b.kept)/b.took.Seconds())
	rec.set("cpu-per-event", name, x, us(b.use.Total())/float64(b.kept))
	var disk int64
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if fi, err := os.Stat(b.path + suffix); err == nil {
			disk += fi.Size()
		}
	}
	rec.set("bytes-per-event", name, x, float64(disk)/float64(b.kept))

	t0 := time.Now()
	all := make([]calllog.Event, 0, b.kept)
	for after := uint64(0); ; {
		evs, err := b.st.EventsAfter(ctx, b.tree, after, 1024)
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			break
		}
		all = append(all, evs...)
		after = evs[len(evs)-1].Seq
	}
	r := replay.Events(all)
	replay := time.Since(t0)
	if cr := r.Call(b.tree); cr == nil || cr.Err() != nil {
		return fmt.Errorf("replay: the call is missing or failed")
	}
	rec.set("replay-rate", name, x, float64(len(all))/replay.Seconds())

	t0 = time.Now()
	steps := 0
	for e, err := range calllog.Follow(ctx, b.st, b.tree, 0, 0) {
		if err != nil {
			return fmt.Errorf("follower: %w", err)
		}
		if e.Seq > e.After+1 {
			return fmt.Errorf("follower: events %d to %d lost", e.After+1, e.Seq-1)
		}
		steps++
	}
	follow := time.Since(t0)
	if steps != b.kept {
		return fmt.Errorf("follower showed %d of %d events", steps, b.kept)
	}
	rec.set("follow-rate", name, x, float64(steps)/follow.Seconds())
	fmt.Fprintf(sw.log, "  %-12s %-10s kept %.1f%% (default queue); %.4g events/s kept, replay %.4g/s, follow %.4g/s, %.0f B/event\n",
		"journal", name, 100*float64(a.kept)/float64(b.kept), float64(b.kept)/b.took.Seconds(),
		float64(len(all))/replay.Seconds(), float64(steps)/follow.Seconds(), float64(disk)/float64(b.kept))
	return nil
}
