//go:build linux

package contain

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Set keeps the processes of one host under its control on Linux
// (docs/operations.md, "Containment"):
//
//   - every child runs in a cgroup of its own where the host can make
//     cgroups (cgroup_linux.go): its limits hold there, and cgroup.kill
//     ends everything it started once it stops;
//   - every child is started from one OS thread locked for the Set's life
//     (the starter), with SIGKILL as its parent-death signal: the kernel
//     sends the signal when the thread that started the child ends, so the
//     thread must outlive every child it started; it ends in Close, after
//     every child was reaped. A host killed with SIGKILL takes its children
//     with it, whether they read their control connection or not. (SIGSTOP,
//     which would keep a child's descendants in its tree for the guardian
//     to walk, does not hold: once the host is gone the child's process
//     group is orphaned, and the kernel sends a group with a stopped
//     member SIGHUP and SIGCONT);
//   - the host process is a child subreaper (unless Options.NoSubreaper), so
//     a descendant whose parent dies becomes the host's child rather than
//     init's, and stays where the host can see, kill and reap it; the
//     host reaps each that exits while the child lives (reap_linux.go);
//   - a guardian process (/bin/sh running guardianScript) is told the
//     Set's cgroups, or without them every process the host saw of its
//     children and their pipes and sockets (lineage), and kills what is
//     left of them when the host is gone, however it went.
//
// Its methods are safe for concurrent use.
type Set struct {
	starts    chan startRequest // unbuffered: a start waits for the starter
	done      chan struct{}     // closed when the starter returned
	subreaper bool              // this Set holds a reference on the subreaper flag
	guard     *guardian         // nil without /bin/sh
	reap      *reaper           // reaps what the process adopted from the children; nil without the subreaper
	cg        *cgroups          // nil without cgroups
	status    Status
	log       *slog.Logger
	closeOnce sync.Once
}

type startRequest struct {
	cmd  *exec.Cmd
	join []string   // v1 tasks files the starter thread joins for the fork
	back []string   // the tasks files it returns to after it
	err  chan error // size 1: the starter never waits for the requester
}

// New sets up the containment of one host. It fails with a *LimitError
// (ErrLimitUnavailable) when a limit cannot be enforced here, and when
// no_new_privs cannot be set; where the children cannot have cgroups and
// no limit needs them, it says why once in log and in Status, and
// contains them without. The caller must call Close once every child
// was reaped.
func New(opts Options, log *slog.Logger) (*Set, error) {
	s := &Set{starts: make(chan startRequest), done: make(chan struct{}), log: log}
	if opts.NoCgroups {
		if err := limitsNeed(opts.Limits, "cgroups are off for this host"); err != nil {
			return nil, err
		}
		s.status.Unavailable = "cgroups are off for this host"
		log.Info("contain: children run without cgroups of their own; the guardian and /proc contain them", "reason", s.status.Unavailable)
	} else {
		cg, why, err := newCgroups(opts.Limits, log)
		if err != nil {
			return nil, err
		}
		s.cg = cg
		if cg != nil {
			s.status.Layout = cg.layout
		}
		if cg == nil || cg.v2 == "" {
			s.status.Unavailable = why
			log.Warn("contain: children run without cgroups of their own; the guardian and /proc contain them", "reason", why)
		} else {
			s.status.Cgroups = true
		}
	}
	ready := make(chan error, 1)
	go s.starter(opts.NoNewPrivs, ready) // stopped by Close (closing starts); Close waits for done
	if err := <-ready; err != nil {
		<-s.done
		if s.cg != nil {
			s.cg.removeSelf()
		}
		return nil, fmt.Errorf("contain: no_new_privs: %w", err)
	}
	if !opts.NoSubreaper {
		s.subreaper = holdSubreaper(log)
	}
	if s.subreaper {
		// Without the subreaper this Set's children leave it nothing to
		// adopt (unless another Host made the process one: the sweep
		// after each child's exit still reaps those).
		s.reap = holdReaper()
	}
	s.guard = startGuardian(log)
	if s.cg != nil {
		for _, d := range s.cg.dirs() {
			s.guard.cgroup(d)
		}
	}
	return s, nil
}

// Status says how the Set contains its children.
func (s *Set) Status() Status { return s.status }

// starter runs every start of the Set on its locked thread. It never
// unlocks: when it returns, after the last child was reaped, the thread
// ends with it (and with it the no_new_privs it may carry).
func (s *Set) starter(noNewPrivs bool, ready chan<- error) {
	runtime.LockOSThread()
	defer close(s.done)
	if noNewPrivs {
		// Per thread, inherited by every process the thread forks.
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			ready <- err
			return
		}
	}
	ready <- nil
	tid := strconv.Itoa(unix.Gettid())
	for req := range s.starts {
		req.err <- s.startOn(tid, req)
	}
}

// startOn starts req.cmd with the starter thread (tid) in the child's v1
// cgroups, so the child is forked into them.
func (s *Set) startOn(tid string, req startRequest) error {
	goBack := func(n int) {
		for _, f := range req.back[:n] {
			if err := writeFile(f, tid); err != nil {
				s.log.Warn("contain: the starter thread cannot return to the host's cgroup", "err", errText(err))
			}
		}
	}
	for i, f := range req.join {
		if err := writeFile(f, tid); err != nil {
			goBack(i)
			return fmt.Errorf("contain: joining the child's cgroup: %s", errText(err))
		}
	}
	err := req.cmd.Start()
	goBack(len(req.back))
	return err
}

// Start starts cmd in a cgroup of its own named name (when the Set has
// cgroups), from the starter thread, with SIGKILL as its parent-death
// signal. ends are the child's ends of its pipes and sockets: without
// cgroups, a process holding one is taken for the child's (lineage). On
// error nothing is left behind.
func (s *Set) Start(cmd *exec.Cmd, name string, ends []*os.File) (*Child, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	ch := &Child{reap: s.reap}
	req := startRequest{cmd: cmd, err: make(chan error, 1)}
	if s.cg != nil {
		cg, err := s.cg.make(name)
		if err != nil {
			return nil, err
		}
		ch.cg = cg
		if cg.v2 != "" {
			fd, err := unix.Open(cg.v2, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				cg.remove()
				return nil, fmt.Errorf("contain: child cgroup: %w", err)
			}
			defer unix.Close(fd)
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
		}
		req.join, req.back = cg.tasks()
	}
	s.starts <- req
	if err := <-req.err; err != nil {
		if ch.cg != nil {
			ch.cg.remove()
		}
		return nil, err
	}
	if ch.cg != nil {
		if err := ch.cg.started(); err != nil {
			s.log.Warn("contain: cannot tighten the pids limit after the start; it stays one above", "err", errText(err))
		}
	}
	// Not yet waited for (Cmd.Wait comes after Start returns), so its
	// stat is there, a zombie's or not.
	ch.root = statOf(cmd.Process.Pid)
	if ch.cg == nil || ch.cg.v2 == "" {
		ch.lin = newLineage(ch.root, ends, s.guard)
	}
	s.reap.add(ch)
	return ch, nil
}

// Close ends the starter and the guardian and removes the Set's cgroups,
// once every child was reaped and released. Idempotent.
func (s *Set) Close() {
	s.closeOnce.Do(func() {
		close(s.starts)
		<-s.done
		if s.reap != nil {
			releaseReaper()
		}
		if s.cg != nil {
			s.cg.removeSelf()
		}
		s.guard.close()
		if s.subreaper {
			releaseSubreaper()
		}
	})
}

// Child is one started child's containment: its cgroup, or without one
// its lineage in /proc.
type Child struct {
	cg   *cgroup  // nil without cgroups
	lin  *lineage // nil where the child has a unified cgroup
	root procStat // the child as it started
	reap *reaper  // nil without the subreaper
}

// Track remembers the descendants the child has now, so that they are
// found again if they leave its tree (without cgroups; with them, the
// cgroup keeps them), and asks for a pass of the reaper over what the
// process adopted from the children (reap_linux.go).
func (c *Child) Track() {
	if c.lin != nil {
		c.lin.track()
	}
	c.reap.poke()
}

// Sweep kills what is left of the child and reaps the descendants the
// process adopted, until none is left or 2 s passed. It is called once
// the child itself was reaped; from then on the reaper leaves the child's
// descendants to it. killed counts the processes signalled,
// left those still there when it gave up.
func (c *Child) Sweep() (killed, left int) {
	c.reap.remove(c)
	if c.lin != nil {
		return c.lin.sweep()
	}
	return c.cg.sweep()
}

// MemoryLimitHit reports whether the kernel killed a process of the
// child's cgroup for its memory limit. It reads the cgroup, so it is
// called before Release.
func (c *Child) MemoryLimitHit() bool { return c.cg != nil && c.cg.memoryLimitHit() }

// Release removes the child's cgroups, after Sweep.
func (c *Child) Release() error {
	if c.cg == nil {
		return nil
	}
	return c.cg.remove()
}

// subreaperRefs counts the Hosts that want the process to be a child
// subreaper. The flag belongs to the whole process, so its count does too:
// the one package-level variable of host, guarding the one piece of
// process-wide state it changes.
var subreaperRefs struct {
	sync.Mutex
	n      int
	before bool // the process was a subreaper already: the flag is never cleared
}

// holdSubreaper makes the process a child subreaper, or counts one more
// Host wanting it; it reports whether the Host holds a reference.
func holdSubreaper(log *slog.Logger) bool {
	s := &subreaperRefs
	s.Lock()
	defer s.Unlock()
	if s.n == 0 {
		var was int32
		err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&was)), 0, 0, 0)
		// Asked anew each time the count leaves zero: the program may have
		// set or cleared the flag itself since the last Host closed.
		s.before = err == nil && was != 0
		if !s.before {
			if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
				log.Warn("host: cannot become a child subreaper; orphaned descendants go to init", "err", err)
				return false
			}
		}
	}
	s.n++
	return true
}

// releaseSubreaper drops a reference; the last one clears the flag unless
// the process had it before the first Host.
func releaseSubreaper() {
	s := &subreaperRefs
	s.Lock()
	defer s.Unlock()
	s.n--
	if s.n == 0 && !s.before {
		unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	}
}

// guardianScript is the guardian. It reads, until end of input (which
// comes when the host closes its end or is gone), lines of:
//
//	"+ PID:START"  a process of the host's children (START is its start
//	               time from /proc/PID/stat)
//	"- PID:START"  that process is gone: forget it
//	"d+ LINK=START" a child's end of a pipe or socket (LINK as
//	               /proc/PID/fd shows it: "pipe:[N]", "socket:[N]"), and
//	               that child's start time
//	"d- LINK=START" its child is gone: forget it
//	"c DIR"        one of the Set's cgroup directories
//
// It first writes 1 to the cgroup.kill of every directory it was told of
// that has one (the Set's unified directory: the kill takes every child's
// cgroup below it), waits (up to 2 s) until none is populated, and
// removes every child's directory (and the cgroups a child made below
// its own) and the Set's. It then finds every process it was told of that still runs with that
// start time, every process in a group or session such a process leads or
// led, every process holding one of the pipes or sockets it was told of
// (the host that held their other ends is gone, so every holder came from
// a child; only one that started no earlier than that child, so that a
// process that was running before it, given one of its descriptors, is
// never taken), and all their descendants: the rules of lineage. It remembers
// each process it found as told, so that the groups and sessions of one
// it killed are still found. It stops them all, scanning again until a
// scan finds none it had not stopped (at most 10 scans: a stopped process
// forks nothing), then kills them until none is left, and exits; it gives
// up after 30 scans in all (a few seconds). It ignores the signals a
// terminal or a process group would send. It never signals itself, init
// or the host (its parent, alive when Close ends its input).
const guardianScript = `
trap '' HUP INT TERM QUIT PIPE
# rmtree removes the cgroup directory $1 and every cgroup below it, the
# deepest first (a child may make cgroups in its own). Globbing is on.
rmtree() {
	for s in "$1"/*/; do
		[ -d "$s" ] && rmtree "${s%/}"
	done
	rmdir "$1" 2>/dev/null
}
set -f
list=' '
fds=' '
cg=''
while read -r op e; do
	case $op in
	c) cg="$cg $e" ;;
	+) list="$list$e " ;;
	-) case $list in *" $e "*) list="${list%% "$e" *} ${list#* "$e" }" ;; esac ;;
	d+) fds="$fds$e " ;;
	d-) case $fds in *" $e "*) fds="${fds%% "$e" *} ${fds#* "$e" }" ;; esac ;;
	esac
done
if [ -n "$cg" ]; then
	for d in $cg; do
		[ -e "$d/cgroup.kill" ] && echo 1 > "$d/cgroup.kill" 2>/dev/null
	done
	i=0
	while [ $i -lt 100 ]; do
		busy=0
		for d in $cg; do
			[ -e "$d/cgroup.events" ] || continue
			while read -r k v; do
				[ "$k" = populated ] && [ "$v" != 0 ] && busy=1
			done < "$d/cgroup.events"
		done
		[ $busy = 0 ] && break
		i=$((i + 1))
		sleep 0.02 2>/dev/null || sleep 1
	done
	set +f
	for d in $cg; do
		[ -d "$d" ] && rmtree "$d"
	done
	set -f
fi
[ "$list" = ' ' ] && [ "$fds" = ' ' ] && exit 0
frozen=' '
round=0
while [ $round -lt 30 ]; do
	round=$((round + 1))
	in=' '
	all=''
	held=' '
	set +f
	for d in /proc/[0-9]*; do
		read -r s 2>/dev/null < "$d/stat" || continue
		all="$all
$s"
	done
	if [ "$fds" != ' ' ]; then
		held=" $(ls -l /proc/[0-9]*/fd 2>/dev/null | while read -r l; do
			case $l in
			/proc/*/fd:) cur=${l#/proc/}; cur=${cur%%/*} ;;
			*" -> "*) case $fds in *" ${l##* -> }="*) t=${fds#*" ${l##* -> }="}; echo "$cur=${t%% *}" ;; esac ;;
			esac
		done) "
	fi
	set -f
	held=" $(echo $held) "
	# Leaders: told ids that are gone or still the process told of.
	lead=' '
	for e in $list; do
		p=${e%%:*}
		if read -r s 2>/dev/null < "/proc/$p/stat"; then
			r=${s##*) }
			set -- $r
			[ "$p:${20}" = "$e" ] || continue
		fi
		lead="$lead$p "
	done
	grew=1
	while [ $grew = 1 ]; do
		grew=0
		while read -r s; do
			[ -n "$s" ] || continue
			p=${s%% *}
			case $in in *" $p "*) continue ;; esac
			[ "$p" = $$ ] || [ "$p" = 1 ] || [ "$p" = "$PPID" ] && continue
			r=${s##*) }
			set -- $r
			hit=0
			told=0
			case $list in *" $p:${20} "*) hit=1; told=1 ;; esac
			case $lead in *" $3 "*|*" $4 "*) hit=1 ;; esac
			case $in in *" $2 "*) hit=1 ;; esac
			case $held in *" $p="*)
				t=${held#*" $p="}
				[ "${20}" -ge "${t%% *}" ] && hit=1 ;;
			esac
			if [ $hit = 1 ]; then
				in="$in$p "
				[ $told = 1 ] || list="$list$p:${20} "
				grew=1
			fi
		done <<EOF
$all
EOF
	done
	[ "$in" = ' ' ] && exit 0
	new=0
	if [ $round -le 10 ]; then
		for p in $in; do
			case $frozen in *" $p "*) continue ;; esac
			frozen="$frozen$p "
			kill -STOP "$p" 2>/dev/null
			new=1
		done
	fi
	[ $new = 1 ] && continue
	alive=0
	for p in $in; do
		if read -r s 2>/dev/null < "/proc/$p/stat"; then
			r=${s##*) }
			set -- $r
			[ "$1" = Z ] && continue
			alive=1
			kill -KILL "$p" 2>/dev/null
		fi
	done
	[ $alive = 0 ] && exit 0
	sleep 0.05 2>/dev/null || sleep 1
done
`

// guardian is the host's side of the guardian process.
type guardian struct {
	cmd *exec.Cmd
	mu  sync.Mutex // serializes lines
	w   *os.File   // the guardian's standard input; nil once closed
	log *slog.Logger
}

// guardianWrite bounds one line's write: a guardian that stops reading
// (stopped by a signal, say) costs a record, never a stall of the host.
const guardianWrite = 100 * time.Millisecond

// startGuardian starts the guardian; without /bin/sh it logs why and
// returns nil (a nil *guardian takes no records).
func startGuardian(log *slog.Logger) *guardian {
	r, w, err := os.Pipe()
	if err != nil {
		log.Warn("host: no guardian", "err", err)
		return nil
	}
	cmd := exec.Command("/bin/sh", "-c", guardianScript)
	cmd.Stdin = r
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	// Its own group, so a terminal's Ctrl-C or a group kill of the host's
	// group does not stop it before it acts; no parent-death signal.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		log.Warn("host: no guardian: descendants of the children may outlive a host killed with SIGKILL", "err", err)
		return nil
	}
	return &guardian{cmd: cmd, w: w, log: log}
}

func (g *guardian) add(pid int, start uint64) { g.line('+', pid, start) }

// cgroup tells of one of the Set's cgroup directories. A path the
// guardian's words cannot hold (with a blank in it) is not told: the
// next host sweeps it (sweepLeftovers).
func (g *guardian) cgroup(dir string) {
	if !strings.ContainsAny(dir, " \t\n") {
		g.send("c " + dir + "\n")
	}
}
func (g *guardian) remove(pid int, start uint64) { g.line('-', pid, start) }

// addFile and removeFile tell of a child's end of a pipe or socket, in
// its readlink form ("pipe:[N]"), and of that child's start time: only a
// process started no earlier than the child is taken for holding it.
func (g *guardian) addFile(link string, start uint64) { g.file("d+ ", link, start) }
func (g *guardian) removeFile(link string, start uint64) {
	g.file("d- ", link, start)
}

func (g *guardian) file(op, link string, start uint64) {
	g.send(op + link + "=" + strconv.FormatUint(start, 10) + "\n")
}

func (g *guardian) line(op byte, pid int, start uint64) {
	b := make([]byte, 0, 32)
	b = append(b, op, ' ')
	b = strconv.AppendInt(b, int64(pid), 10)
	b = append(b, ':')
	b = strconv.AppendUint(b, start, 10)
	b = append(b, '\n')
	g.send(string(b))
}

// send writes one line (at most a few dozen bytes: one write of a pipe is
// atomic up to PIPE_BUF) and reports whether the guardian took it.
func (g *guardian) send(line string) bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.w == nil {
		return false
	}
	g.w.SetWriteDeadline(time.Now().Add(guardianWrite))
	if _, err := io.WriteString(g.w, line); err != nil {
		if errors.Is(err, syscall.EPIPE) {
			g.goneLocked(err)
			return false
		}
		g.log.Warn("host: guardian not told of a process", "err", err)
		return false
	}
	return true
}

// goneLocked forgets a guardian that is gone: it is told nothing more,
// and that is logged once. g.mu is held.
func (g *guardian) goneLocked(err error) {
	g.log.Warn("host: the guardian is gone: descendants of the children may outlive a host killed with SIGKILL", "err", err)
	g.w.Close()
	g.w = nil
}

// guardianExit bounds the wait for the guardian after its input closed.
const guardianExit = 5 * time.Second

// close closes the guardian's input and waits for it to exit.
func (g *guardian) close() {
	if g == nil {
		return
	}
	g.mu.Lock()
	if g.w != nil {
		g.w.Close()
		g.w = nil
	}
	g.mu.Unlock()
	t := time.AfterFunc(guardianExit, func() { g.cmd.Process.Kill() })
	g.cmd.Wait()
	t.Stop()
}

// String says how the Set contains its children, for logs.
func (s *Set) String() string {
	cg := "none"
	if s.status.Cgroups {
		cg = s.status.Layout
	}
	return fmt.Sprintf("cgroups=%s, pdeathsig, subreaper=%v, guardian=%v", cg, s.subreaper, s.guard != nil)
}
