//go:build linux

package contain

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// Reaping what the host adopted while its children live.
//
// As a subreaper the host process becomes the parent of every orphaned
// descendant of its children, and of the zombie each leaves when it
// exits. A zombie counts against its cgroup's pids.max and the machine's
// pids until its parent reaps it, so the host reaps its children's
// adopted zombies while the children run, not only in the sweep that
// follows a child's exit.
//
// What is reaped: a zombie whose parent is the host process, that is not
// a process a Set started (every child's exit status is its Cmd.Wait's),
// and that belongs to one of the live children of a Set: its unified cgroup
// is the child's (or below it), or, without cgroups, the rules of lineage
// name it. Only those, each by a pidfd opened before its start time is
// checked again (reapPID), never with wait(-1): the program's other
// children, started with os/exec or otherwise, and orphans of its own
// processes are left to it.
//
// When: on SIGCHLD, which the kernel sends the host for each of its
// children that exits, adopted or not, and for an orphan that reaches it
// already a zombie. Between signals a pass costs nothing. In a Go
// program (not one built as a C library, -buildmode=c-archive or
// c-shared, where Notify would take SIGCHLD from the C program's handler)
// Notify for SIGCHLD changes nothing else: os/signal gives SIGCHLD no
// default action to replace, the Go runtime's handler catches it whether
// or not a channel is notified, os/exec waits for its own process by pid
// or pidfd (not by signal), and every other channel the program notified
// still gets its own copy. A program that ignores SIGCHLD (signal.Ignore)
// is not asked for it: the kernel then reaps every child of the process
// itself, and Notify would undo the Ignore. A pass also runs when a child
// starts and at each of its health checks (Track): a bounded poll, so
// that a program that takes SIGCHLD from every channel (signal.Reset)
// leaves a zombie to the host's process table for one health check at
// most.
//
// Cost: a pass reads the children of the host process's threads
// (/proc/self/task/*/children) and the stat of each; then, for a zombie
// only, its cgroup (when a child has one) or the stat of the group and
// session leaders its lineage rules ask about. Passes are at least
// reapGap apart, so a child that forks and exits as fast as it can costs
// the host at most one pass per reapGap.

// reapGap is the least time between two passes.
const reapGap = 10 * time.Millisecond

// reaper reaps the zombies the host process adopted from the live
// children of every Set that holds the subreaper: the process has one, as
// it has one subreaper flag, so a SIGCHLD costs one pass however many
// Hosts run. Its goroutine is started by the first holdReaper and stopped
// and waited for by the last releaseReaper.
type reaper struct {
	self int
	sig  chan os.Signal // size 1: SIGCHLDs coalesce, and one pending pass looks at every child
	wake chan struct{}  // size 1, likewise: a pass asked for by Start or Track
	stop chan struct{}  // closed by stopReaper
	done chan struct{}  // closed when run returned

	mu   sync.Mutex
	kids map[*Child]struct{} // the Sets' children from their start until their sweep
}

// reapers counts the Sets that hold the process's reaper (the one
// running, nil while none does).
var reapers struct {
	mu   sync.Mutex
	refs int
	r    *reaper
}

// holdReaper returns the process's reaper, starting it for the first
// Set that holds it.
func holdReaper() *reaper {
	reapers.mu.Lock()
	defer reapers.mu.Unlock()
	if reapers.refs == 0 {
		reapers.r = startReaper()
	}
	reapers.refs++
	return reapers.r
}

// releaseReaper drops a Set's hold; the last one stops the reaper and
// waits for it.
func releaseReaper() {
	reapers.mu.Lock()
	defer reapers.mu.Unlock()
	reapers.refs--
	if reapers.refs == 0 {
		reapers.r.stopReaper()
		reapers.r = nil
	}
}

// startReaper starts the reaper's goroutine.
func startReaper() *reaper {
	r := &reaper{
		self: os.Getpid(),
		sig:  make(chan os.Signal, 1),
		wake: make(chan struct{}, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
		kids: map[*Child]struct{}{},
	}
	if !signal.Ignored(syscall.SIGCHLD) { // ignored, the kernel reaps every child itself
		signal.Notify(r.sig, syscall.SIGCHLD)
	}
	go r.run() // stopped by stopReaper closing stop; stopReaper waits for done
	return r
}

// stopReaper stops the goroutine and waits for it. A nil reaper has none.
func (r *reaper) stopReaper() {
	if r == nil {
		return
	}
	signal.Stop(r.sig)
	close(r.stop)
	<-r.done
}

func (r *reaper) run() {
	defer close(r.done)
	gap := time.NewTimer(reapGap)
	gap.Stop()
	defer gap.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-r.sig:
		case <-r.wake:
		}
		// One pass answers every request made so far: a signal and a
		// poke that both wait are taken together.
		select {
		case <-r.sig:
		default:
		}
		select {
		case <-r.wake:
		default:
		}
		r.pass()
		gap.Reset(reapGap)
		select {
		case <-r.stop:
			return
		case <-gap.C:
		}
	}
}

// poke asks for a pass; one already asked for takes this one too.
func (r *reaper) poke() {
	if r == nil {
		return
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// add makes c's adopted descendants the reaper's, and asks for a pass.
func (r *reaper) add(c *Child) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.kids[c] = struct{}{}
	r.mu.Unlock()
	r.poke()
}

// remove leaves c's adopted descendants to its sweep. Idempotent.
func (r *reaper) remove(c *Child) {
	if r == nil {
		return
	}
	r.mu.Lock()
	delete(r.kids, c)
	r.mu.Unlock()
}

// pass reaps every zombie child of the host process that one of the
// Sets' live children left it (the comment at the top of this file).
func (r *reaper) pass() {
	r.mu.Lock()
	kids := make([]*Child, 0, len(r.kids))
	for c := range r.kids {
		kids = append(kids, c)
	}
	r.mu.Unlock()
	if len(kids) == 0 {
		return
	}
	unified := false // some kid has a unified cgroup: a zombie's is worth reading
	for _, c := range kids {
		unified = unified || c.lin == nil
	}
	for _, st := range zombieChildren(r.self) {
		pid := st.pid
		started := false
		for _, c := range kids {
			// A root whose stat could not be read at its start has start
			// 0: its pid alone names it (unreaped, no other process has it).
			if c.root.pid == st.pid && (c.root.start == 0 || c.root.start == st.start) {
				started = true // a Set's own child: its Cmd.Wait's
				break
			}
		}
		if started {
			continue
		}
		var cg string
		if unified {
			cg, _ = unifiedCgroup(pid) // a zombie's still names the cgroup it died in
		}
		for _, c := range kids {
			if c.adopted(st, cg) {
				reapPID(pid, st.start)
				break
			}
		}
	}
}

// adopted reports whether st, a zombie child of the host process that c
// did not start as, comes from c: it started no earlier than c, and its
// unified cgroup cg is c's or below it, or, where c has no unified
// cgroup, c's lineage names it. The start time matters with cgroups too:
// a child that runs as the host's user may write its cgroup's
// cgroup.procs and so move other processes of the program into it; one
// older than the child is never taken for the child's.
func (c *Child) adopted(st procStat, cg string) bool {
	if c.lin != nil {
		return c.lin.adopted(st)
	}
	return st.start >= c.root.start && c.cg != nil && c.cg.v2Rel != "" && cg != "" && within(cg, c.cg.v2Rel)
}
