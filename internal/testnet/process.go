package testnet

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Process is a provider binary started as a host starts it (docs/protocol.md §1):
// fd 3 is its end of a control socketpair, fd 4 a stream listener at
// <dir>/streams.sock in a fresh 0700 directory, stdin /dev/null, the SKULK_*
// environment set, in a process group of its own.
type Process struct {
	// Cmd is the started command.
	Cmd *exec.Cmd
	// Host drives the control connection; its stream dials go to the
	// child's listener.
	Host *Host
	// StreamsPath is the stream listener's path.
	StreamsPath string

	out      *Buffer
	waitOnce sync.Once
	waitDone chan struct{}
	waitErr  error
}

// StartProcess starts bin with args as a child with id "test"; env adds
// variables to the SKULK_* ones (PATH and HOME are passed through). The
// process is killed (its whole group) and waited for when the test ends.
func StartProcess(t testing.TB, bin string, args []string, env ...string) *Process {
	t.Helper()
	p := &Process{out: &Buffer{}, waitDone: make(chan struct{})}
	p.Cmd = exec.Command(bin, args...)
	p.Cmd.Env = env
	p.Cmd.Stdout, p.Cmd.Stderr = p.out, p.out
	control, path := Exec(t, p.Cmd)
	p.StreamsPath, p.Host = path, NewHost(control, path)
	t.Cleanup(func() {
		p.Host.Close()
		p.Kill()
		p.Wait(10 * time.Second)
	})
	return p
}

// Exec starts cmd, made by exec.Command, as a host starts a child with id
// "test" (docs/protocol.md §1): fd 3 its end of a control socketpair, fd 4
// a listener at streams.sock in a fresh 0700 directory, stdin /dev/null,
// in a process group of its own, with the SKULK_* environment, PATH and
// HOME before cmd.Env. The caller sets cmd's output and WaitDelay, and
// kills the process group and waits for cmd when done with it. Exec
// returns the host's end of the control connection and the listener's
// path; when it fails it fails t, having stopped what it started.
func Exec(t testing.TB, cmd *exec.Cmd) (*net.UnixConn, string) {
	t.Helper()
	path := filepath.Join(PrivateDir(t), "streams.sock")
	ln, err := netListenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	lnFile, err := ln.File()
	ln.Close() // the child's fd 4 keeps the socket listening
	if err != nil {
		t.Fatal(err)
	}
	defer lnFile.Close()
	hostEnd, childEnd, err := SocketPairFiles()
	if err != nil {
		t.Fatal(err)
	}
	defer childEnd.Close()
	cmd.ExtraFiles = []*os.File{childEnd, lnFile} // fd 3, fd 4
	cmd.Env = append([]string{
		"SKULK_PROTOCOL=1", "SKULK_CONTROL_FD=3", "SKULK_STREAMS_FD=4", "SKULK_CHILD_ID=test",
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
	}, cmd.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		hostEnd.Close()
		t.Fatal(err)
	}
	control, err := FileConn(hostEnd)
	if err != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		t.Fatal(err)
	}
	return control, path
}

// ErrWaitTimeout: the process did not exit in time.
var ErrWaitTimeout = errors.New("testnet: process did not exit in time")

// Wait waits up to timeout for the process to exit and returns its exit
// status (-1 when killed by a signal). Later calls return the same result.
func (p *Process) Wait(timeout time.Duration) (int, error) {
	p.waitOnce.Do(func() {
		go func() { // stopped by the process exiting; Kill makes sure it does
			p.waitErr = p.Cmd.Wait()
			close(p.waitDone)
		}()
	})
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.waitDone:
	case <-t.C:
		return 0, ErrWaitTimeout
	}
	var ee *exec.ExitError
	if p.waitErr != nil && !errors.As(p.waitErr, &ee) {
		return 0, p.waitErr
	}
	return p.Cmd.ProcessState.ExitCode(), nil
}

// Kill sends SIGKILL to the process group.
func (p *Process) Kill() {
	if p.Cmd.Process != nil {
		syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
	}
}

// Output returns what the process wrote on stdout and stderr so far.
func (p *Process) Output() string { return p.out.String() }

// Buffer is a bytes.Buffer safe for concurrent writers and readers: a
// process's output copier, a logger, and the test reading it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Len returns how many bytes were written so far.
func (s *Buffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}
