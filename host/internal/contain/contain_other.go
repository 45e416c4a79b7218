//go:build !linux

package contain

import (
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
)

// Set on systems other than Linux is the process group alone: there are
// no cgroups, no /proc to find a descendant that left the child's group,
// no parent-death signal, no subreaper (docs/operations.md,
// "Containment").
type Set struct{}

// New fails with a *LimitError when a limit is asked for (cgroups are
// Linux's), and when no_new_privs is.
func New(opts Options, _ *slog.Logger) (*Set, error) {
	if err := limitsNeed(opts.Limits, "cgroups are Linux only"); err != nil {
		return nil, err
	}
	if opts.NoNewPrivs {
		return nil, errors.New("contain: no_new_privs is Linux only")
	}
	return &Set{}, nil
}

// Start starts cmd.
func (s *Set) Start(cmd *exec.Cmd, _ string, _ []*os.File) (*Child, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &Child{pgid: cmd.Process.Pid}, nil
}

// Close does nothing.
func (s *Set) Close() {}

// Status reports no cgroups.
func (s *Set) Status() Status { return Status{Unavailable: "cgroups are Linux only"} }

func (s *Set) String() string { return "process group only" }

// limitsNeed returns a *LimitError for the first limit l asks for.
func limitsNeed(l Limits, reason string) error {
	if l.MemoryBytes > 0 {
		return &LimitError{Limit: "memory", Reason: reason}
	}
	if l.Pids > 0 {
		return &LimitError{Limit: "pids", Reason: reason}
	}
	if l.CPU > 0 {
		return &LimitError{Limit: "cpu", Reason: reason}
	}
	return nil
}

// Child on systems other than Linux knows the child's process group.
type Child struct{ pgid int }

// Track does nothing.
func (c *Child) Track() {}

// Sweep kills what is left of the child's process group.
func (c *Child) Sweep() (killed, left int) {
	if syscall.Kill(-c.pgid, syscall.SIGKILL) == nil {
		killed = 1
	}
	return killed, 0
}

// MemoryLimitHit is false: there are no limits.
func (c *Child) MemoryLimitHit() bool { return false }

// Release does nothing.
func (c *Child) Release() error { return nil }
