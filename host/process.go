package host

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/skulkrt/skulk/host/internal/contain"
	"github.com/skulkrt/skulk/internal/sockpair"
)

// stderrTail is how much of a child's stderr is kept for errors.
const stderrTail = 64 << 10

// maxLogLine bounds one forwarded log line in bytes; longer lines are
// forwarded in pieces of this size.
const maxLogLine = 4 << 10

// process is one running child process with its private directory and its
// half of the connections. Its goroutines (the reaper and two log
// forwarders) are waited for by wait.
type process struct {
	cmd      *exec.Cmd
	pid      int
	dir      string   // private 0700 directory, removed by cleanup
	dirLock  *os.File // holds dir's flock until cleanup removed it (sweepStale)
	sockPath string
	ctrl     net.Conn // the host's end of the control socketpair

	// waited is closed by the reaper as soon as the process was reaped,
	// when its exit status is known; exited once what it left was swept
	// too (contain.Child.Sweep). A call that saw its child die waits only
	// for waited: its failure names the status, and the sweep, which
	// scans /proc or the cgroup, is the supervisor's to wait for.
	waited  chan struct{}
	exited  chan struct{}
	waitErr error // set by the reaper before waited is closed

	contained *contain.Child // the child's cgroup, or its descendants in /proc

	stderr  tailBuffer
	logs    sync.WaitGroup // the two forwarders
	logDone chan struct{}  // closed once both forwarders returned
	pipes   [2]*os.File    // read ends, closed by cleanup
}

// spawn creates the directory, the listener and the socketpair and starts
// the command in its own process group as cred (nil: the host's user),
// through c (on Linux: in a cgroup of its own, from c's locked thread,
// with a parent-death signal). On error nothing is left behind.
func spawn(cfg *Config, childID string, log *slog.Logger, c *contain.Set, cred *syscall.Credential) (p *process, err error) {
	dir, err := os.MkdirTemp(cfg.tempBase(), privatePrefix)
	if err != nil {
		return nil, fmt.Errorf("host: private directory: %w", err)
	}
	// proc, not the named result p: a failing return sets p to nil before
	// the clean-up below runs.
	proc := &process{dir: dir, sockPath: filepath.Join(dir, sockName), waited: make(chan struct{}), exited: make(chan struct{}), logDone: make(chan struct{})}
	p = proc
	var toClose []io.Closer
	defer func() {
		for _, c := range toClose {
			c.Close()
		}
		if err != nil {
			if proc.ctrl != nil {
				proc.ctrl.Close()
			}
			for _, f := range proc.pipes {
				if f != nil {
					f.Close()
				}
			}
			os.RemoveAll(dir)
			if proc.dirLock != nil {
				proc.dirLock.Close()
			}
		}
	}()
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("host: private directory: %w", err)
	}
	if proc.dirLock, err = lockDir(dir); err != nil {
		if !noFlock(err) {
			return nil, fmt.Errorf("host: private directory: lock: %w", err)
		}
		proc.dirLock, err = nil, nil // no flock here: no sweep can take it either
	}

	// fd 4: the stream listener.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: p.sockPath, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("host: stream listener: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	lnFile, err := ln.File()
	ln.Close()
	if err != nil {
		return nil, fmt.Errorf("host: stream listener: %w", err)
	}
	toClose = append(toClose, lnFile)

	// fd 3: the control socketpair.
	hostEnd, childEnd, err := sockpair.Files("control", "control-child")
	if err != nil {
		return nil, fmt.Errorf("host: control %w", err)
	}
	toClose = append(toClose, hostEnd, childEnd)
	if p.ctrl, err = net.FileConn(hostEnd); err != nil {
		return nil, fmt.Errorf("host: control socketpair: %w", err)
	}

	// stdout and stderr pipes; stdin is /dev/null (a nil Stdin).
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("host: stdout pipe: %w", err)
	}
	p.pipes[0] = outR
	toClose = append(toClose, outW)
	errR, errW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("host: stderr pipe: %w", err)
	}
	p.pipes[1] = errR
	toClose = append(toClose, errW)

	cmd := exec.Command(cfg.Command, cfg.Args...)
	cmd.Dir = cfg.Dir
	cmd.Env = childEnv(cfg, childID)
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.ExtraFiles = []*os.File{childEnd, lnFile}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	// The child's ends go with it: without cgroups the lineage knows them
	// by their inodes. They are closed before the reaper can sweep, so
	// that no fork of the program holds them then (the descriptor rule of
	// host/internal/contain's lineage).
	contained, err := c.Start(cmd, childID, []*os.File{outW, errW, childEnd, lnFile})
	if err != nil {
		return nil, fmt.Errorf("host: start child: %w", err)
	}
	p.cmd, p.pid, p.contained = cmd, cmd.Process.Pid, contained
	for _, f := range toClose {
		f.Close()
	}
	toClose = nil

	log = log.With("child", childID, "pid", p.pid)
	p.logs.Add(2)
	go p.forward(outR, "stdout", log, nil) // stopped by EOF once the process group is gone, or by cleanup closing outR
	go p.forward(errR, "stderr", log, &p.stderr)
	go func() { // stopped by the process exiting; waited for through exited
		p.waitErr = cmd.Wait()
		close(p.waited)
		// Whatever is left of the child (its group, and on Linux every
		// descendant that left it) goes too, so no descendant outlives
		// it and none keeps its pipes open.
		if killed, left := p.contained.Sweep(); left > 0 {
			log.Warn("descendants of the child survived SIGKILL", "signalled", killed, "left", left)
		} else if killed > 0 {
			log.Info("descendants of the child killed", "signalled", killed)
		}
		close(p.exited)
	}()
	go func() { // stopped when both forwarders return; waited for through logDone
		p.logs.Wait()
		close(p.logDone)
	}()
	return p, nil
}

// childEnv builds the child's environment: the allowed names, ExtraEnv,
// then the protocol's variables.
func childEnv(cfg *Config, childID string) []string {
	env := make([]string, 0, len(cfg.Env)+len(cfg.ExtraEnv)+4)
	for _, name := range cfg.Env {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	env = append(env, cfg.ExtraEnv...)
	return append(env, "SKULK_PROTOCOL=1", "SKULK_CONTROL_FD=3", "SKULK_STREAMS_FD=4", "SKULK_CHILD_ID="+childID)
}

// logChildOutput is the message of the log records that forward a child's
// output, one per line (Config.Logger states it).
const logChildOutput = "child output"

// forward copies r to the logger line by line until EOF; tail, if not nil,
// keeps the last bytes.
func (p *process) forward(r io.Reader, stream string, log *slog.Logger, tail *tailBuffer) {
	defer p.logs.Done()
	br := bufio.NewReaderSize(r, maxLogLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if tail != nil {
				tail.Write(line)
			}
			text := bytes.TrimRight(line, "\r\n")
			if !utf8.Valid(text) {
				text = bytes.ToValidUTF8(text, []byte("\uFFFD"))
			}
			log.Info(logChildOutput, "stream", stream, "line", string(text))
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

// signal sends sig to the child's process group unless it was reaped.
func (p *process) signal(sig syscall.Signal) {
	select {
	case <-p.exited:
		return
	default:
	}
	syscall.Kill(-p.pid, sig)
}

// dead reports whether the process has been reaped.
func (p *process) dead() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// gone reports whether the process has exited, reaped or not: a zombie
// counts as gone, so a busy reaper does not hide a death.
func (p *process) gone() bool {
	if p.dead() {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/stat")
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return false
	}
	state := stat[i+2]
	return state == 'Z' || state == 'X'
}

// kill stops the process group: SIGTERM, then SIGKILL after grace, and
// waits for the reaper. It reports whether SIGKILL was needed.
func (p *process) kill(grace time.Duration) (killed bool) {
	if p.dead() {
		return false
	}
	p.contained.Track() // what the child's tree is before it dies and its orphans move
	p.signal(syscall.SIGTERM)
	p.signal(syscall.SIGCONT) // a stopped process acts on SIGTERM only once continued
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
		return false
	case <-t.C:
	}
	p.signal(syscall.SIGKILL)
	<-p.exited
	return true
}

// logWait bounds how long cleanup waits for the log forwarders after the
// process exited (a grandchild outside the group may hold the pipes).
const logWait = time.Second

// cleanup, once the process was reaped, waits (bounded) for the forwarders,
// closes the host's ends and removes the directory.
func (p *process) cleanup() error {
	<-p.exited
	t := time.NewTimer(logWait)
	select {
	case <-p.logDone:
	case <-t.C:
	}
	t.Stop()
	for _, f := range p.pipes {
		f.Close() // unblocks a forwarder still reading
	}
	<-p.logDone
	p.ctrl.Close()
	err := os.RemoveAll(p.dir)
	if p.dirLock != nil {
		p.dirLock.Close() // after the removal: a sweep never sees it unlocked
	}
	if cerr := p.contained.Release(); err == nil {
		err = cerr
	}
	return err
}

// memoryLimitHit reports whether the kernel killed a process of the
// child's cgroup for Config.MemoryMax; read before cleanup.
func (p *process) memoryLimitHit() bool { return p.contained.MemoryLimitHit() }

// exitStatus describes how the process ended, for logs and causes; once
// waited is closed it names the exit code or the signal.
func (p *process) exitStatus() string {
	if p.cmd.ProcessState == nil {
		return "running"
	}
	return p.cmd.ProcessState.String()
}

// tailBuffer keeps the last stderrTail bytes written to it. Safe for
// concurrent use.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte // at most stderrTail bytes
}

func (t *tailBuffer) Write(b []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(b) >= stderrTail {
		t.buf = append(t.buf[:0], b[len(b)-stderrTail:]...)
		return
	}
	if over := len(t.buf) + len(b) - stderrTail; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, b...)
}

// String returns the tail as valid UTF-8.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	for len(b) > 0 && !utf8.RuneStart(b[0]) {
		b = b[1:]
	}
	return string(bytes.ToValidUTF8(b, []byte("\uFFFD")))
}
