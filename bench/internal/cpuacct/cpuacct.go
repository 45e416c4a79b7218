// Package cpuacct measures what a unit of work costs the processes doing
// it: the user+system CPU time of this process (the host side of a
// benchmark) and of live child processes, and their memory and file
// descriptors, all read from the kernel (getrusage and /proc) on Linux.
//
// getrusage(RUSAGE_CHILDREN) counts only children that have been waited
// for, so a child that is still running is read from /proc/PID/stat
// instead: the utime and stime of every thread of the process, in clock
// ticks. A Meter takes one such reading before a piece of work and one
// after, while the children are still alive:
//
//	m, _ := cpuacct.Start(childPID)
//	// ... work ...
//	u, _ := m.Stop()
//	perFrame := u.Total() / time.Duration(frames)
package cpuacct

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// clockTick is the unit of /proc/PID/stat's utime and stime: USER_HZ,
// which Linux fixes at 100 per second for every architecture's /proc
// (sysconf(_SC_CLK_TCK) would say the same, but needs cgo).
const clockTick = 10 * time.Millisecond

// ErrNoProcess is returned for a process id /proc has no entry for (the
// process exited, or it was never started).
var ErrNoProcess = errors.New("cpuacct: no such process")

// Self returns the user+system CPU time this process has used, all
// threads together (getrusage RUSAGE_SELF).
func Self() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("cpuacct: getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// Proc returns the user+system CPU time the live process pid has used,
// all its threads together, from /proc/pid/stat, to the clock tick (10 ms).
func Proc(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, ErrNoProcess
		}
		return 0, fmt.Errorf("cpuacct: stat: %w", err)
	}
	// The command name (field 2) is in parentheses and may hold spaces
	// and parentheses itself: the fields after it start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("cpuacct: stat: no command name")
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state): utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, errors.New("cpuacct: stat: too few fields")
	}
	ut, err1 := strconv.ParseUint(string(f[11]), 10, 64)
	st, err2 := strconv.ParseUint(string(f[12]), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("cpuacct: stat: utime or stime: %w", err)
	}
	return time.Duration(ut+st) * clockTick, nil
}

// Usage is the CPU time a piece of work took in the host (this process)
// and in the children, and the wall time it lasted.
type Usage struct {
	// Host is this process's user+system CPU time.
	Host time.Duration `json:"host_cpu_ns"`
	// Children is the children's user+system CPU time, all together.
	Children time.Duration `json:"child_cpu_ns"`
	// Wall is the wall time between Start and Stop.
	Wall time.Duration `json:"wall_ns"`
}

// Total is Host plus Children.
func (u Usage) Total() time.Duration { return u.Host + u.Children }

// Meter measures the CPU time of this process and of a set of live
// children between Start and Stop. It is used by one goroutine.
type Meter struct {
	pids  []int
	self  time.Duration
	kids  time.Duration
	start time.Time
}

// Start reads the CPU times of this process and of the children pids now.
// Every child must still be running when Stop is called.
func Start(pids ...int) (*Meter, error) {
	m := &Meter{pids: append([]int(nil), pids...)}
	var err error
	if m.self, m.kids, err = read(m.pids); err != nil {
		return nil, err
	}
	m.start = time.Now()
	return m, nil
}

// Stop reads the CPU times again and returns what was used since Start.
// It may be called more than once; each call measures from Start.
func (m *Meter) Stop() (Usage, error) {
	self, kids, err := read(m.pids)
	if err != nil {
		return Usage{}, err
	}
	return Usage{Host: self - m.self, Children: kids - m.kids, Wall: time.Since(m.start)}, nil
}

func read(pids []int) (self, kids time.Duration, err error) {
	if self, err = Self(); err != nil {
		return 0, 0, err
	}
	for _, pid := range pids {
		c, err := Proc(pid)
		if err != nil {
			return 0, 0, fmt.Errorf("child %d: %w", pid, err)
		}
		kids += c
	}
	return self, kids, nil
}

// OnCPU returns the time the threads of the live process pid have run,
// user and system together, summed from /proc/pid/task/*/schedstat, which
// counts in nanoseconds where Proc counts 10 ms clock ticks: an idle
// process's CPU is made of wake-ups of microseconds each, which ticks
// count only when one happens to span a tick. A thread that ended takes
// its time out of the sum, so compare two readings only over a window in
// which the process ends no thread (an idle one).
func OnCPU(pid int) (time.Duration, error) {
	dir := procPath(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, ErrNoProcess
		}
		return 0, fmt.Errorf("cpuacct: task: %w", err)
	}
	var sum time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread ended since the listing
		}
		if err != nil {
			return 0, fmt.Errorf("cpuacct: schedstat: %w", err)
		}
		// "run_ns wait_ns timeslices"
		f := bytes.Fields(b)
		if len(f) < 1 {
			return 0, errors.New("cpuacct: schedstat: empty")
		}
		ns, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("cpuacct: schedstat: run time: %w", err)
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}
