package hostile_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
)

// The host reaps what it adopted from a child while the child lives
// (docs/operations.md, "Containment"), and nothing else.

// adoptedReapBound bounds how long a zombie the host adopted stays one
// once its call ended: passes run on SIGCHLD, so it takes milliseconds;
// the bound is for a loaded machine under -race. Without the reaper the
// zombies stay until the child exits.
const adoptedReapBound = 5 * time.Second

// zombiesIn lists the zombie children of this process (the host process)
// in process group pgrp, or in any group when pgrp is 0.
func zombiesIn(pgrp int) []int {
	var out []int
	for _, pid := range processesWithParent(os.Getpid()) {
		if st, ok := readStat(pid); ok && (pgrp == 0 || st.pgrp == pgrp) && (st.state == 'Z' || st.state == 'X') {
			out = append(out, pid)
		}
	}
	return out
}

// orphans calls the orphans tool (n double-forked sleeps of 10 ms) and
// returns its call.
func orphans(t *testing.T, ctx context.Context, h *host.Host, n int) *host.Call {
	t.Helper()
	c, err := h.Call(ctx, "orphans", frame.MustPayload(map[string]any{"n": n}))
	require.NoError(t, err)
	return c
}

// orphansResult waits for an orphans call's terminal and returns the
// child's pid.
func orphansResult(t *testing.T, c *host.Call) int {
	t.Helper()
	term := terminal(t, c, 60*time.Second)
	require.Equal(t, frame.KindCompleted, term.Kind, "terminal %v", term.Error)
	var v struct{ N, Pid int }
	require.NoError(t, term.Payload.Decode(&v))
	require.Positive(t, v.Pid)
	return v.Pid
}

// TestAdoptedZombiesReaped: a child that keeps double-forking
// short-lived processes leaves the host process no zombie of them once
// they exited, while it lives and serves calls, with cgroups (the
// zombie's cgroup is the child's) and without (its process group is the
// child's).
func TestAdoptedZombiesReaped(t *testing.T) {
	for _, noCgroups := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoCgroups=%v", noCgroups), func(t *testing.T) {
			cfg := config(t, "serve", t.TempDir())
			cfg.NoCgroups = noCgroups
			h := startHost(t, cfg)
			if !noCgroups {
				needCgroups(t, h)
			}
			require.True(t, subreaper(t), "the host process is no subreaper")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for round := range 3 {
				pid := orphansResult(t, orphans(t, ctx, h, 100))
				start := time.Now()
				for {
					z := zombiesIn(pid)
					if len(z) == 0 {
						break
					}
					if time.Since(start) > adoptedReapBound {
						require.FailNow(t, fmt.Sprintf("round %d: %d zombies of the child still the host's %v after its call ended: %v", round, len(z), adoptedReapBound, z))
					}
					time.Sleep(5 * time.Millisecond)
				}
				t.Logf("round %d: no zombie of the child left %v after its call ended", round, time.Since(start).Round(time.Millisecond))
				require.True(t, alive(pid), "the child is gone")
				works(t, h)
				require.True(t, alive(pid), "the child is gone")
			}
		})
	}
}

// TestReaperLeavesTheProgramsChildren: processes the program started
// itself with os/exec, in the host's process group and in one of their
// own, that exit while a host's child keeps the host adopting and
// reaping, are still the program's: each Cmd.Wait gets its exit status.
func TestReaperLeavesTheProgramsChildren(t *testing.T) {
	for _, noCgroups := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoCgroups=%v", noCgroups), func(t *testing.T) {
			cfg := config(t, "serve", t.TempDir())
			cfg.NoCgroups = noCgroups
			h := startHost(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			c := orphans(t, ctx, h, 300)
			var cmds []*exec.Cmd
			for i, own := range []bool{false, true, false, true} {
				cmd := exec.Command("/bin/sh", "-c", "exit "+strconv.Itoa(7+i))
				cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: own}
				require.NoError(t, cmd.Start())
				t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() }) // on failure; a second Wait is harmless
				cmds = append(cmds, cmd)
			}
			// Zombies for a while: the reaper's passes, on the child's
			// orphans' SIGCHLDs and on health checks, see them.
			deadline := time.Now().Add(20 * time.Second)
			for _, cmd := range cmds {
				for {
					st, ok := readStat(cmd.Process.Pid)
					require.True(t, ok, "pid %d reaped by someone else than its Cmd.Wait", cmd.Process.Pid)
					if st.state == 'Z' {
						break
					}
					require.False(t, time.Now().After(deadline), "pid %d never exited", cmd.Process.Pid)
					time.Sleep(2 * time.Millisecond)
				}
			}
			// Passes while they are zombies: their own exits' SIGCHLDs
			// ask for passes, and so does every health tick (one per
			// HealthInterval), before its ping while the call is in
			// flight. Three more pongs mean more ticks asked for passes
			// after all four were zombies; a pass runs soon after it is
			// asked for, so one most likely ran before the Waits below.
			pongs := func() (n uint64) {
				for _, c := range h.Stats().PingRTT.Counts {
					n += c
				}
				return n
			}
			seen := pongs()
			for pongs() < seen+3 {
				require.False(t, time.Now().After(deadline), "no health check while the program's processes were zombies")
				time.Sleep(10 * time.Millisecond)
			}
			for i, cmd := range cmds {
				err := cmd.Wait()
				var ee *exec.ExitError
				if !errors.As(err, &ee) {
					assert.Fail(t, fmt.Sprintf("Wait of the program's process %d: %v, want exit status %d", i, err, 7+i))
					continue
				}
				assert.Equal(t, 7+i, ee.ExitCode(), "the program's process %d", i)
			}
			orphansResult(t, c)
		})
	}
}
