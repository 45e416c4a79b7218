// Package contain runs the processes a host starts and keeps them, and
// everything they start, under the host's control: on Linux a cgroup of
// their own per child (with resource limits), a parent-death signal, a
// subreaper and a guardian process that outlives the host; elsewhere the
// process group alone. It knows nothing of the protocol: package host
// gives it an *exec.Cmd to start and asks it to sweep what is left once
// the child was reaped, the way go-plugin keeps its process runner apart
// from its RPC client.
//
// One Set serves one Host:
//
//	set, err := contain.New(contain.Options{Limits: contain.Limits{Pids: 64}}, log)
//	if err != nil { ... } // a limit this machine cannot enforce
//	defer set.Close()     // after every child was reaped
//	child, err := set.Start(cmd, "c0.1", childEnds)
//	...
//	cmd.Wait()
//	child.Sweep()   // kills and reaps what is left of the child
//	child.Release() // removes its cgroup
//
// docs/operations.md ("Containment") states what it guarantees.
package contain

import (
	"errors"
	"strconv"
)

// Limits are the resources one child and everything it starts may use
// together, enforced by the child's cgroup. The zero value means no limit.
type Limits struct {
	// MemoryBytes caps the memory of the child's cgroup (v2 memory.max; v1
	// memory.limit_in_bytes, and memory.memsw.limit_in_bytes where swap is
	// accounted). Past it the kernel's OOM killer kills a process of the
	// cgroup. 0 means no limit.
	MemoryBytes int64
	// Pids caps the processes and threads of the cgroup (pids.max): a fork
	// past it fails with EAGAIN. 0 means no limit.
	Pids int64
	// CPU caps the CPU time of the cgroup in cores: 1.5 is one and a half
	// cores' time per period (cpu.max, v1 cpu.cfs_quota_us). 0 means no
	// limit.
	CPU float64
}

// IsZero reports whether l asks for no limit.
func (l Limits) IsZero() bool { return l == Limits{} }

// Options configure a Set. The zero value contains with cgroups where the
// machine allows, makes the process a subreaper, and limits nothing.
type Options struct {
	// Limits are every child's resource limits; the zero value means none.
	Limits Limits
	// NoSubreaper keeps the process from becoming a child subreaper (see
	// host.Config.NoSubreaper).
	NoSubreaper bool
	// NoCgroups starts the children without cgroups even where the host
	// could create them: the parent-death signal, the subreaper, the
	// guardian and the lineage of /proc alone contain them. Limits need
	// cgroups, so NoCgroups with Limits fails New.
	NoCgroups bool
	// NoNewPrivs starts every child with no_new_privs set: neither it nor
	// anything it runs gains privileges through set-user-ID or
	// set-group-ID programs or file capabilities.
	NoNewPrivs bool
}

// ErrLimitUnavailable is matched (errors.Is) by the error New returns when
// a limit was asked for whose cgroup controller this machine (or this
// process's place in the cgroup tree, or its privileges) does not offer.
// A limit is never silently ignored.
var ErrLimitUnavailable = errors.New("contain: resource limit unavailable")

// LimitError says which limit cannot be enforced and why; it matches
// ErrLimitUnavailable.
type LimitError struct {
	Limit  string // "memory", "pids" or "cpu"
	Reason string // why, in words; never user data
}

func (e *LimitError) Error() string {
	return "contain: " + e.Limit + " limit unavailable: " + e.Reason
}

// Unwrap returns ErrLimitUnavailable.
func (e *LimitError) Unwrap() error { return ErrLimitUnavailable }

// Status says how a Set contains its children.
type Status struct {
	// Cgroups is true when every child runs in a cgroup of its own.
	Cgroups bool
	// Layout names the cgroup layout the Set uses: "v2" (the unified
	// hierarchy alone), "hybrid" (the unified hierarchy for the children's
	// cgroups, v1 hierarchies for the controllers of the limits), "v1"
	// (v1 hierarchies for the limits, no unified hierarchy), or "" without
	// cgroups.
	Layout string
	// Unavailable says why the children run without cgroups of their own,
	// "" when they have them.
	Unavailable string
}

// formatBytes renders n bytes in the largest binary unit that divides it,
// for messages about the memory limit: "64 MiB", "1536 KiB", "1000 B".
func formatBytes(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + " " + u.name
		}
	}
	return strconv.FormatInt(n, 10) + " B"
}
