//go:build !linux

package host

import (
	"log/slog"
	"os"
	"os/exec"
	"syscall"
)

// containment on systems other than Linux is the process group alone:
// there is no /proc to find a descendant that left the child's group, no
// parent-death signal, no subreaper (docs/operations.md, "Hostile
// children").
type containment struct{}

func newContainment(*Config, *slog.Logger) *containment { return &containment{} }

func (c *containment) start(cmd *exec.Cmd) error { return cmd.Start() }

func (c *containment) close() {}

func (c *containment) String() string { return "process group only" }

// lineage on systems other than Linux knows the child's process group.
type lineage struct{ pgid int }

func newLineage(pid int, _ []*os.File, _ *containment) *lineage { return &lineage{pgid: pid} }

func (l *lineage) track() {}

// sweep kills what is left of the child's process group.
func (l *lineage) sweep() (killed, left int) {
	if syscall.Kill(-l.pgid, syscall.SIGKILL) == nil {
		killed = 1
	}
	return killed, 0
}
