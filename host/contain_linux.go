//go:build linux

package host

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// containment keeps the processes of one Host under its control on Linux
// (docs/operations.md, "Hostile children"):
//
//   - every child is started from one OS thread locked for the Host's life
//     (the starter), with SIGKILL as its parent-death signal: the kernel
//     sends the signal when the thread that started the child ends, so the
//     thread must outlive every child it started; it ends in close, after
//     every child was reaped. A host killed with SIGKILL takes its children
//     with it, whether they read their control connection or not. (SIGSTOP,
//     which would keep a child's descendants in its tree for the guardian
//     to walk, does not hold: once the host is gone the child's process
//     group is orphaned, and the kernel sends a group with a stopped
//     member SIGHUP and SIGCONT);
//   - the host process is a child subreaper (unless Config.NoSubreaper), so
//     a descendant whose parent dies becomes the host's child rather than
//     init's, and stays where the host can see, kill and reap it (lineage);
//   - a guardian process (/bin/sh running guardianScript) is told every
//     process the host saw of its children and their pipes and sockets,
//     and stops and kills what is left of them when the host is gone,
//     however it went.
type containment struct {
	starts    chan startRequest // unbuffered: a start waits for the starter
	done      chan struct{}     // closed when the starter returned
	subreaper bool              // this Host holds a reference on the subreaper flag
	guard     *guardian         // nil without /bin/sh
	closeOnce sync.Once
}

type startRequest struct {
	cmd *exec.Cmd
	err chan error // size 1: the starter never waits for the requester
}

func newContainment(cfg *Config, log *slog.Logger) *containment {
	c := &containment{starts: make(chan startRequest), done: make(chan struct{})}
	go c.starter() // stopped by close (closing starts); close waits for done
	if !cfg.NoSubreaper {
		c.subreaper = holdSubreaper(log)
	}
	c.guard = startGuardian(c, log)
	return c
}

// starter runs every start of the Host on its locked thread. It never
// unlocks: when it returns, after the last child was reaped, the thread
// ends with it.
func (c *containment) starter() {
	runtime.LockOSThread()
	defer close(c.done)
	for req := range c.starts {
		req.err <- req.cmd.Start()
	}
}

// start starts cmd on the starter thread with SIGKILL as its parent-death
// signal.
func (c *containment) start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	req := startRequest{cmd: cmd, err: make(chan error, 1)}
	c.starts <- req
	return <-req.err
}

// close ends the starter and the guardian, once every child was reaped.
func (c *containment) close() {
	c.closeOnce.Do(func() {
		close(c.starts)
		<-c.done
		c.guard.close()
		if c.subreaper {
			releaseSubreaper()
		}
	})
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
//
// It then finds every process it was told of that still runs with that
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
set -f
list=' '
fds=' '
while read -r op e; do
	case $op in
	+) list="$list$e " ;;
	-) case $list in *" $e "*) list="${list%% "$e" *} ${list#* "$e" }" ;; esac ;;
	d+) fds="$fds$e " ;;
	d-) case $fds in *" $e "*) fds="${fds%% "$e" *} ${fds#* "$e" }" ;; esac ;;
	esac
done
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
func startGuardian(c *containment, log *slog.Logger) *guardian {
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

func (g *guardian) add(pid int, start uint64)    { g.line('+', pid, start) }
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

// describeContainment says what containment a Host has, for its log.
func (c *containment) String() string {
	return fmt.Sprintf("pdeathsig, subreaper=%v, guardian=%v", c.subreaper, c.guard != nil)
}
