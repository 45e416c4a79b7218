//go:build linux

package contain

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A child's descendants on Linux (docs/operations.md, "Hostile children").
//
// A descendant may leave the child's process group (setpgid, setsid) and
// lose its parent, so the group kill alone does not reach it. The host
// finds a child's descendants in /proc by four rules, each of which names
// only processes that come from the child:
//
//   - the tree: a process whose parent is a descendant (or the child);
//   - what was seen: a process the host saw in the child's tree before
//     (lineage.track, at every health check and before every stop), found
//     again by pid and start time, so a reused pid never matches;
//   - groups and sessions: a process whose process group or session is
//     led, or was led, by the child or a descendant seen before. The
//     kernel keeps a pid number in use while any process has it as its
//     group or session id, so such a group is the descendant's own; a
//     leader whose pid now names another process (another start time) is
//     not taken;
//   - descriptors: a process holding the child's end of one of its pipes
//     (stdout, stderr: the write end) or sockets (control, streams) — a
//     grandchild that holds the pipes is exactly the one that would keep
//     the host's log forwarders waiting. The host keeps only the read ends
//     of the pipes and its own ends of the sockets (it closes the child's
//     as soon as the child started), so a process the program forks, which
//     holds copies of the host's descriptors between its fork and its
//     exec, is not taken for a descendant, whatever its process group.
//
// Every rule applies only to processes started no earlier than the child.
// Signals go through a pidfd opened before the start time is checked
// again, so a pid reused in between is never signalled; the host reaps
// only the descendants the process adopted as a subreaper (whichever Host
// made it one), by their pidfd or pid, never with wait(-1), so the Wait of
// a process os/exec started elsewhere in the program is not taken from it.

// maxSeen bounds the descendants one child's lineage remembers; a child
// with more live descendants than this is still swept by the tree, group,
// session and descriptor rules, only not by what was seen.
const maxSeen = 1024

// sweepLimit bounds how long a sweep goes on killing and reaping (a
// process in uninterruptible sleep dies only when it leaves it).
const sweepLimit = 2 * time.Second

// procStat is what /proc/PID/stat says of one process.
type procStat struct {
	pid, ppid, pgrp, sid int
	state                byte
	start                uint64 // clock ticks after boot
}

// statOf is pid's stat as readStat reads it, with pid set even when the
// process is gone: its start is then 0, which every rule that compares
// start times takes as "started before anything", so they still hold.
func statOf(pid int) procStat {
	st, _ := readStat(pid)
	st.pid = pid
	return st
}

// readStat reads /proc/pid/stat; ok is false when the process is gone.
func readStat(pid int) (st procStat, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return st, false
	}
	return parseStat(pid, b)
}

// parseStat parses a stat line: "pid (comm) state ppid pgrp session ...";
// comm may hold spaces and parentheses, so the fields start after the last
// ')'.
func parseStat(pid int, b []byte) (st procStat, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return st, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return st, false
	}
	st.pid, st.state = pid, f[0][0]
	var err error
	if st.ppid, err = strconv.Atoi(f[1]); err != nil {
		return st, false
	}
	if st.pgrp, err = strconv.Atoi(f[2]); err != nil {
		return st, false
	}
	if st.sid, err = strconv.Atoi(f[3]); err != nil {
		return st, false
	}
	if st.start, err = strconv.ParseUint(f[19], 10, 64); err != nil {
		return st, false
	}
	return st, true
}

// allProcs reads the stat of every process started at or after since.
func allProcs(since uint64) []procStat {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	out := make([]procStat, 0, 64)
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok && st.start >= since {
			out = append(out, st)
		}
	}
	return out
}

// lineage remembers one child and the descendants the host saw of it, and
// finds, kills and reaps them all. Safe for concurrent use.
type lineage struct {
	root  procStat // the child, as it started
	fds   []string // readlink forms of the child's ends: "pipe:[N]", "socket:[N]"
	self  int      // the host's pid
	guard *guardian

	mu    sync.Mutex
	seen  map[int]uint64 // pid → start of every descendant seen and not yet found gone; at most maxSeen
	swept bool           // the final sweep is over: nothing more is remembered
}

// newLineage starts remembering the child root (statOf its pid); files
// are its ends of the pipes and sockets it was given.
func newLineage(root procStat, files []*os.File, g *guardian) *lineage {
	l := &lineage{self: os.Getpid(), seen: map[int]uint64{}, guard: g, root: root}
	for _, f := range files {
		var st syscall.Stat_t
		if f == nil || syscall.Fstat(int(f.Fd()), &st) != nil {
			continue
		}
		kind := "socket"
		if st.Mode&syscall.S_IFMT == syscall.S_IFIFO {
			kind = "pipe"
		}
		l.fds = append(l.fds, kind+":["+strconv.FormatUint(st.Ino, 10)+"]")
	}
	l.guard.add(l.root.pid, l.root.start)
	for _, link := range l.fds {
		l.guard.addFile(link, l.root.start)
	}
	return l
}

// track walks the child's tree through /proc/PID/task/TID/children and
// remembers every process in it; it forgets the ones that are gone. The
// walk counts only while the child is still the process that started (a
// reaped child's pid may name another process, whose tree is not ours),
// and a process only while its parent is the one it was listed under.
func (l *lineage) track() {
	found := map[int]uint64{}
	if l.rootRuns() {
		queue := []int{l.root.pid}
		for len(queue) > 0 && len(found) < maxSeen {
			pid := queue[0]
			queue = queue[1:]
			for _, kid := range childrenOf(pid) {
				if _, dup := found[kid]; dup || kid == l.self {
					continue
				}
				if st, ok := readStat(kid); ok && st.ppid == pid && st.start >= l.root.start {
					found[kid] = st.start
					queue = append(queue, kid)
				}
			}
		}
		if !l.rootRuns() {
			clear(found) // reaped during the walk: its pid's children may be another's
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.swept {
		return
	}
	for pid, start := range l.seen {
		// Gone. A zombie of the host process is remembered until it is
		// reaped: what was seen may be the one rule that still names it
		// (reaper, sweep).
		if st, ok := readStat(pid); !ok || st.start != start {
			delete(l.seen, pid)
			l.guard.remove(pid, start)
		}
	}
	for pid, start := range found {
		if _, ok := l.seen[pid]; ok || len(l.seen) >= maxSeen {
			continue
		}
		l.seen[pid] = start
		l.guard.add(pid, start)
	}
}

// rootRuns reports whether the child's pid still names the child, alive.
func (l *lineage) rootRuns() bool {
	st, ok := readStat(l.root.pid)
	return ok && st.start == l.root.start && st.state != 'Z' && st.state != 'X'
}

// adopted reports whether st, a zombie child of the host process, comes
// from the child by the rules of the comment at the top of this file that
// such a zombie can still meet: it was seen, or its process group or
// session is led, or was led, by the child or a descendant seen (as in
// members, a leader whose pid names another process now is none). It has
// no descriptors left, and its parent is the host. The child itself is
// not adopted: it is the process the host started.
func (l *lineage) adopted(st procStat) bool {
	if st.ppid != l.self || st.start < l.root.start || st.pid == l.root.pid && st.start == l.root.start {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.swept {
		return false
	}
	if start, ok := l.seen[st.pid]; ok && start == st.start {
		return true
	}
	return l.leadsLocked(st.pgrp) || l.leadsLocked(st.sid)
}

// leadsLocked reports whether id is the pid of the child or of a
// descendant seen, and names no other process now. l.mu is held.
func (l *lineage) leadsLocked(id int) bool {
	start, ok := l.seen[id]
	if id == l.root.pid {
		start, ok = l.root.start, true
	}
	if !ok {
		return false
	}
	p, alive := readStat(id)
	return leaderStands(start, p, alive)
}

// leaderStands reports whether a group or session id taken from a leader
// seen with the start time start still names that leader's group or
// session, now that its pid names the process now (alive) or none: the
// leader is gone (its group and session keep the id) or is the same
// process. A pid that names another process is no descendant's id.
func leaderStands(start uint64, now procStat, alive bool) bool {
	return !alive || now.start == start
}

// childrenOf lists the children of every thread of pid.
func childrenOf(pid int) []int {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tids, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var kids []int
	for _, t := range tids {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				kids = append(kids, n)
			}
		}
	}
	return kids
}

// zombieChildren returns the stat of every child of pid that is a zombie
// (or being reaped), as /proc has them now.
func zombieChildren(pid int) []procStat {
	var out []procStat
	for _, kid := range childrenOf(pid) {
		if st, ok := readStat(kid); ok && st.ppid == pid && (st.state == 'Z' || st.state == 'X') {
			out = append(out, st)
		}
	}
	return out
}

// members returns the processes of procs that come from the child, by the
// rules of the comment at the top of this file.
func (l *lineage) members(procs []procStat) map[int]procStat {
	byPID := make(map[int]procStat, len(procs))
	for _, p := range procs {
		byPID[p.pid] = p
	}
	l.mu.Lock()
	seen := make(map[int]uint64, len(l.seen)+1)
	for pid, start := range l.seen {
		seen[pid] = start
	}
	l.mu.Unlock()
	seen[l.root.pid] = l.root.start
	// Leaders: the ids a descendant's group or session may carry. A pid
	// that names another process now is no descendant's id.
	leaders := map[int]bool{}
	for pid, start := range seen {
		if p, alive := byPID[pid]; leaderStands(start, p, alive) {
			leaders[pid] = true
		}
	}
	in := map[int]procStat{}
	for _, p := range procs {
		if p.pid == l.self || p.pid == 1 {
			continue
		}
		if start, ok := seen[p.pid]; ok && start == p.start || leaders[p.pgrp] || leaders[p.sid] || l.holdsOurs(p.pid) {
			in[p.pid] = p
		}
	}
	// The tree: children of members, to a fixed point.
	kids := map[int][]procStat{}
	for _, p := range procs {
		kids[p.ppid] = append(kids[p.ppid], p)
	}
	queue := make([]int, 0, len(in))
	for pid := range in {
		queue = append(queue, pid)
	}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, k := range kids[pid] {
			if _, ok := in[k.pid]; !ok && k.pid != l.self && k.pid != 1 {
				in[k.pid] = k
				queue = append(queue, k.pid)
			}
		}
	}
	return in
}

// holdsOurs reports whether pid holds one of the child's sockets, or one
// of its pipes open for writing.
func (l *lineage) holdsOurs(pid int) bool {
	if len(l.fds) == 0 {
		return false
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	d, err := os.Open(dir)
	if err != nil {
		return false
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	for _, n := range names {
		link, err := os.Readlink(dir + "/" + n)
		if err != nil {
			continue
		}
		for _, ours := range l.fds {
			if link == ours && (!strings.HasPrefix(link, "pipe:") || writable(pid, n)) {
				return true
			}
		}
	}
	return false
}

// writable reports whether pid's descriptor fd (a decimal string) is open
// for writing, by its flags in /proc/PID/fdinfo/FD (octal).
func writable(pid int, fd string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/fdinfo/" + fd)
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			return err == nil && flags&syscall.O_ACCMODE != syscall.O_RDONLY
		}
	}
	return false
}

// sweep kills every process that comes from the child and reaps the ones
// the host adopted, until none is left or sweepLimit passed; it then
// forgets them. It is called once the child itself was reaped. killed
// counts the signals sent (a process may take several), left the
// processes still there when it gave up.
func (l *lineage) sweep() (killed int, left int) {
	deadline := time.Now().Add(sweepLimit)
	signalled := map[int]uint64{} // pid → start: a zombie has no descriptors and may match no rule any more
	for {
		pending := 0
		procs := allProcs(l.root.start)
		in := l.members(procs)
		for _, p := range procs {
			if start, ok := signalled[p.pid]; ok && start == p.start {
				in[p.pid] = p
			}
		}
		for pid, p := range in {
			if p.state == 'Z' || p.state == 'X' {
				// A zombie of ours is one the process adopted as a
				// subreaper: a descendant no one else waits for. Another
				// Host may be the one that made the process a subreaper,
				// so it is reaped whatever this Host's NoSubreaper says.
				// Another's zombie is its parent's to reap, and its parent
				// is being killed.
				if p.ppid == l.self {
					reapPID(pid, p.start)
					pending++ // looked at once more
				}
				continue
			}
			pending++
			if killPID(pid, p.start) {
				killed++
				signalled[pid] = p.start
			}
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			left = pending
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	l.mu.Lock()
	for pid, start := range l.seen {
		l.guard.remove(pid, start)
	}
	clear(l.seen)
	l.swept = true
	l.mu.Unlock()
	l.guard.remove(l.root.pid, l.root.start)
	for _, link := range l.fds {
		l.guard.removeFile(link, l.root.start)
	}
	return killed, left
}

// reapPID reaps the zombie pid if it still is the process that started at
// start: through a pidfd where there are pidfds, so that a pid reaped
// meanwhile (by the sweep of another lineage that also named it) and
// reused by a process the program started is never waited for.
func reapPID(pid int, start uint64) {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ENOSYS) {
		if st, ok := readStat(pid); ok && st.start == start {
			var ws unix.WaitStatus
			unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		}
		return
	}
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if st, ok := readStat(pid); !ok || st.start != start {
		return
	}
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED|unix.WNOHANG, nil); errors.Is(err, unix.EINVAL) {
		// P_PIDFD came in Linux 5.4, a release after pidfd_open: the
		// start time checked just before is what keeps a reused pid
		// safe, as without pidfds.
		var ws unix.WaitStatus
		unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	}
}

// killPID sends SIGKILL to pid through a pidfd if it still is the process
// that started at start.
func killPID(pid int, start uint64) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ENOSYS) {
		// No pidfds (before Linux 5.3): the start time checked just
		// before is what keeps a reused pid safe.
		if st, ok := readStat(pid); ok && st.start == start {
			return syscall.Kill(pid, syscall.SIGKILL) == nil
		}
		return false
	}
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	if st, ok := readStat(pid); !ok || st.start != start {
		return false
	}
	return unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) == nil
}
