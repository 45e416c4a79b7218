//go:build linux

package contain

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A cgroup per child (docs/operations.md, "Containment").
//
// Each Set makes one directory of its own, named hostPrefix + the host
// process's pid and start time + a random tail, in the unified (v2)
// hierarchy, and one in each v1 hierarchy whose controller a limit needs
// (the hybrid layout: the unified hierarchy without controllers, memory,
// pids and cpu on v1). Every child gets a directory of its own in each.
//
//   - The child starts in its cgroups: on the unified hierarchy through
//     clone3's CLONE_INTO_CGROUP (SysProcAttr.UseCgroupFD); v1 directories
//     refuse that, so the starter thread joins the child's v1 cgroups
//     (its tid into their tasks files) for the fork and returns to the
//     host's own after it. No code of the child runs outside them.
//   - Once the child was reaped, cgroup.kill kills everything left in its
//     cgroup, whatever it did to leave the child's tree, group or
//     session; the host reaps the zombies it adopted as a subreaper (a
//     zombie's /proc/PID/cgroup still names its cgroup), then removes the
//     directories.
//   - The guardian is told the Set's directories: when the host is gone,
//     however it went, it writes cgroup.kill of the Set's unified
//     directory (which kills every child's cgroup below it) and removes
//     the directories.
//   - A Set that starts removes the directories of Sets whose process is
//     gone (its pid names no process, or one with another start time):
//     what a host killed before its guardian acted left behind.
//
// Without the unified hierarchy (v1 alone) the limits still hold through
// v1, and the lineage of /proc finds the descendants.

// hostPrefix starts the name of every Set's directory.
const hostPrefix = "skulk-"

// Controller names, as cgroup files and /proc/self/cgroup spell them.
const (
	ctlMemory = "memory"
	ctlPids   = "pids"
	ctlCPU    = "cpu"
)

// cpuPeriod is the CPU limit's period in microseconds (as systemd's).
const cpuPeriod = 100_000

// hierarchy is one mounted cgroup hierarchy.
type hierarchy struct {
	root  string // the mount's root inside the hierarchy ("/" mostly)
	point string // where it is mounted
}

// dir returns the directory of the cgroup path (as /proc/self/cgroup
// writes it) in h.
func (h hierarchy) dir(path string) string {
	rel := path
	if h.root != "/" {
		rel = strings.TrimPrefix(path, h.root)
	}
	return filepath.Join(h.point, rel)
}

// layout is what /proc/self/mountinfo and /proc/self/cgroup say.
type layout struct {
	v2      *hierarchy
	v2Own   string // the process's cgroup path on v2 ("" when unknown)
	v1      map[string]hierarchy
	v1Own   map[string]string // controller → the process's cgroup path
	v2Ctl   map[string]bool   // controllers the process's v2 cgroup offers
	problem string            // why the layout is unusable, "" when it is not
}

func readLayout() layout {
	l := layout{v1: map[string]hierarchy{}, v1Own: map[string]string{}, v2Ctl: map[string]bool{}}
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		l.problem = "no /proc/self/mountinfo"
		return l
	}
	defer mi.Close()
	sc := bufio.NewScanner(mi)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT POINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER
		f := strings.Fields(sc.Text())
		sep := -1
		for i, s := range f {
			if s == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+3 >= len(f) {
			continue
		}
		h := hierarchy{root: unescapeMount(f[3]), point: unescapeMount(f[4])}
		switch f[sep+1] {
		case "cgroup2":
			if l.v2 == nil {
				l.v2 = &h
			}
		case "cgroup":
			for _, o := range strings.Split(f[sep+3], ",") {
				switch o {
				case ctlMemory, ctlPids, ctlCPU:
					if _, dup := l.v1[o]; !dup {
						l.v1[o] = h
					}
				}
			}
		}
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		l.problem = "no /proc/self/cgroup"
		return l
	}
	for line := range strings.Lines(string(b)) {
		// ID:CONTROLLERS:PATH
		parts := strings.SplitN(strings.TrimRight(line, "\n"), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			l.v2Own = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			l.v1Own[c] = parts[2]
		}
	}
	if l.v2 != nil && l.v2Own != "" {
		if b, err := os.ReadFile(filepath.Join(l.v2.dir(l.v2Own), "cgroup.controllers")); err == nil {
			for _, c := range strings.Fields(string(b)) {
				l.v2Ctl[c] = true
			}
		}
	}
	return l
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroups is a Set's directories: where its children's cgroups are made.
type cgroups struct {
	limits Limits
	log    *slog.Logger
	layout string

	v2    string // the Set's unified directory, "" without one
	v2Rel string // its path as /proc/PID/cgroup writes it
	v2Ctl []string

	v1    map[string]string // controller → the Set's v1 directory
	v1Own map[string]string // controller → the process's own v1 directory (where the starter returns)

	locks []*os.File // an exclusive flock on each directory, held until it is removed
}

// needed lists the controllers l needs.
func (l Limits) needed() []string {
	var c []string
	if l.MemoryBytes > 0 {
		c = append(c, ctlMemory)
	}
	if l.Pids > 0 {
		c = append(c, ctlPids)
	}
	if l.CPU > 0 {
		c = append(c, ctlCPU)
	}
	return c
}

// newCgroups makes the Set's directories. It returns a nil *cgroups and
// the reason when the children cannot have cgroups of their own and no
// limit needs them; a *LimitError when a limit cannot be had.
func newCgroups(limits Limits, log *slog.Logger) (cg *cgroups, unavailable string, err error) {
	l := readLayout()
	self, ok := readStat(os.Getpid())
	if !ok {
		return nil, "cannot read /proc/self/stat", limitsNeed(limits, "cannot read /proc/self/stat")
	}
	var tail [4]byte
	rand.Read(tail[:])
	name := fmt.Sprintf("%s%d-%d-%s", hostPrefix, self.pid, self.start, hex.EncodeToString(tail[:]))
	cg = &cgroups{limits: limits, log: log, v1: map[string]string{}, v1Own: map[string]string{}}
	fail := func(e error) (*cgroups, string, error) {
		cg.removeSelf()
		return nil, "", e
	}

	var v1Need []string
	v2Usable := l.problem == "" && l.v2 != nil && l.v2Own != ""
	for _, c := range limits.needed() {
		if v2Usable && l.v2Ctl[c] {
			cg.v2Ctl = append(cg.v2Ctl, c)
		} else {
			v1Need = append(v1Need, c)
		}
	}
	if v2Usable {
		// The children's cgroups go in the process's own cgroup; where
		// controllers must be enabled for them, beside it instead (pure
		// v2's rule: a cgroup that hands controllers to its children has
		// no processes of its own, unless it is the root).
		parentRel := l.v2Own
		if len(cg.v2Ctl) > 0 && l.v2Own != "/" {
			parentRel = filepath.Dir(l.v2Own)
		}
		parent := l.v2.dir(parentRel)
		if len(cg.v2Ctl) > 0 {
			enableControllers(parent, cg.v2Ctl)
		}
		sweepLeftovers(parent, true, log)
		dir := filepath.Join(parent, name)
		switch err := os.Mkdir(dir, 0o755); {
		case err != nil:
			unavailable = "cannot create a cgroup in " + parent + ": " + errText(err)
			if parentRel != l.v2Own {
				unavailable += " (with limits on the unified hierarchy the host process must sit in a leaf cgroup, and the children's cgroups are made beside it)"
			}
			if len(cg.v2Ctl) > 0 {
				return fail(&LimitError{Limit: cg.v2Ctl[0], Reason: unavailable})
			}
		case !exists(filepath.Join(dir, "cgroup.kill")):
			os.Remove(dir)
			unavailable = "the kernel has no cgroup.kill (Linux 5.14 or later has)"
			if len(cg.v2Ctl) > 0 {
				return fail(&LimitError{Limit: cg.v2Ctl[0], Reason: unavailable})
			}
		default:
			cg.v2, cg.v2Rel = dir, filepath.Join(parentRel, name)
			if err := cg.lock(dir); err != nil {
				return fail(fmt.Errorf("contain: locking the host's cgroup: %w", err))
			}
			if len(cg.v2Ctl) > 0 {
				if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+"+strings.Join(cg.v2Ctl, " +")); err != nil {
					return fail(&LimitError{Limit: cg.v2Ctl[0], Reason: "cannot enable the controller for the children's cgroups in " + dir + ": " + errText(err)})
				}
			}
		}
	} else {
		unavailable = "no unified (v2) cgroup hierarchy"
		if l.problem != "" {
			unavailable = l.problem
		}
	}
	// Leftovers of dead hosts in every v1 hierarchy a limit may use.
	for _, c := range []string{ctlMemory, ctlPids, ctlCPU} {
		if h, ok := l.v1[c]; ok && l.v1Own[c] != "" {
			sweepLeftovers(h.dir(l.v1Own[c]), false, log)
		}
	}
	for _, c := range v1Need {
		h, ok := l.v1[c]
		if !ok || l.v1Own[c] == "" {
			return fail(&LimitError{Limit: c, Reason: "no " + c + " controller: neither the unified hierarchy nor a v1 hierarchy offers it here"})
		}
		own := h.dir(l.v1Own[c])
		dir := filepath.Join(own, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fail(&LimitError{Limit: c, Reason: "cannot create a cgroup in " + own + ": " + errText(err)})
		}
		cg.v1[c], cg.v1Own[c] = dir, own
		if err := cg.lock(dir); err != nil {
			return fail(fmt.Errorf("contain: locking the host's cgroup: %w", err))
		}
	}
	switch {
	case cg.v2 != "" && len(cg.v1) > 0:
		cg.layout = "hybrid"
	case cg.v2 != "":
		cg.layout = "v2"
	case len(cg.v1) > 0:
		cg.layout = "v1"
	default:
		return nil, unavailable, nil
	}
	return cg, unavailable, nil
}

// enableControllers hands ctls to the cgroups below parent where its
// cgroup.subtree_control does not already: the root cgroup may, and a
// parent whose processes all sit in leaves. Where it cannot, the write
// into the Set's directory fails next and says so.
func enableControllers(parent string, ctls []string) {
	b, err := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control"))
	if err != nil {
		return
	}
	on := map[string]bool{}
	for _, c := range strings.Fields(string(b)) {
		on[c] = true
	}
	for _, c := range ctls {
		if !on[c] {
			writeFile(filepath.Join(parent, "cgroup.subtree_control"), "+"+c)
		}
	}
}

// limitsNeed returns a *LimitError for the first limit l asks for, nil
// when it asks for none.
func limitsNeed(l Limits, reason string) error {
	if n := l.needed(); len(n) > 0 {
		return &LimitError{Limit: n[0], Reason: reason}
	}
	return nil
}

// errText describes a file error without its path.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// writeFile writes s to a cgroup file (which takes one write).
func writeFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// keyed reads the value of key in a "key value" cgroup file
// (cgroup.events, memory.events, memory.oom_control).
func keyed(path, key string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == key {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// dirs lists the Set's directories, the unified one first.
func (cg *cgroups) dirs() []string {
	var d []string
	if cg.v2 != "" {
		d = append(d, cg.v2)
	}
	for _, c := range []string{ctlMemory, ctlPids, ctlCPU} {
		if dir, ok := cg.v1[c]; ok {
			d = append(d, dir)
		}
	}
	return d
}

// lock takes an exclusive flock on dir and keeps it: the sign, with the
// pid and start time in its name, that its Set's process is alive
// (sweepLeftovers). A pid alone could name a process of another pid
// namespace; a lock is the same wherever the directory is seen.
func (cg *cgroups) lock(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return err
	}
	cg.locks = append(cg.locks, f)
	return nil
}

// removeSelf removes the Set's directories (empty by then: every child's
// was removed), then lets their locks go.
func (cg *cgroups) removeSelf() {
	for _, d := range cg.dirs() {
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			cg.log.Warn("contain: cannot remove the host's cgroup", "dir", d, "err", errText(err))
		}
	}
	for _, f := range cg.locks {
		f.Close()
	}
	cg.locks = nil
}

// cgroup is one child's cgroups.
type cgroup struct {
	cg    *cgroups
	v2    string            // its unified directory, "" without one
	v2Rel string            // as /proc/PID/cgroup writes it
	v1    map[string]string // controller → its v1 directory
}

// make creates the child's directories and writes its limits. On error
// nothing is left.
func (cg *cgroups) make(name string) (c *cgroup, err error) {
	c = &cgroup{cg: cg, v1: map[string]string{}}
	defer func() {
		if err != nil {
			c.remove()
		}
	}()
	if cg.v2 != "" {
		dir := filepath.Join(cg.v2, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, fmt.Errorf("contain: child cgroup: %w", err)
		}
		c.v2, c.v2Rel = dir, cg.v2Rel+"/"+name
	}
	for _, ctl := range []string{ctlMemory, ctlPids, ctlCPU} {
		parent, ok := cg.v1[ctl]
		if !ok {
			continue
		}
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, fmt.Errorf("contain: child %s cgroup: %w", ctl, err)
		}
		c.v1[ctl] = dir
	}
	if err := c.writeLimits(true); err != nil {
		return nil, err
	}
	return c, nil
}

// writeLimits writes the limits into the child's directories. starting
// says the starter thread is about to join the v1 pids cgroup for the
// fork, where it counts as one task until it returns (started).
func (c *cgroup) writeLimits(starting bool) error {
	l := c.cg.limits
	w := func(dir, file, v string) error {
		if err := writeFile(filepath.Join(dir, file), v); err != nil {
			return fmt.Errorf("contain: writing %s: %s", file, errText(err))
		}
		return nil
	}
	quota := max(int64(l.CPU*cpuPeriod), 1000)
	for _, ctl := range c.cg.v2Ctl {
		var err error
		switch ctl {
		case ctlMemory:
			if err = w(c.v2, "memory.max", strconv.FormatInt(l.MemoryBytes, 10)); err == nil && exists(filepath.Join(c.v2, "memory.swap.max")) {
				err = w(c.v2, "memory.swap.max", "0")
			}
			if err == nil && exists(filepath.Join(c.v2, "memory.oom.group")) {
				err = w(c.v2, "memory.oom.group", "1")
			}
		case ctlPids:
			err = w(c.v2, "pids.max", pidsMax(l.Pids))
		case ctlCPU:
			err = w(c.v2, "cpu.max", strconv.FormatInt(quota, 10)+" "+strconv.Itoa(cpuPeriod))
		}
		if err != nil {
			return err
		}
	}
	if dir, ok := c.v1[ctlMemory]; ok {
		if err := w(dir, "memory.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
			return err
		}
		if exists(filepath.Join(dir, "memory.memsw.limit_in_bytes")) {
			if err := w(dir, "memory.memsw.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
				return err
			}
		}
	}
	if dir, ok := c.v1[ctlPids]; ok {
		n := l.Pids
		if starting {
			n++
		}
		if err := w(dir, "pids.max", pidsMax(n)); err != nil {
			return err
		}
	}
	if dir, ok := c.v1[ctlCPU]; ok {
		if err := w(dir, "cpu.cfs_period_us", strconv.Itoa(cpuPeriod)); err != nil {
			return err
		}
		if err := w(dir, "cpu.cfs_quota_us", strconv.FormatInt(quota, 10)); err != nil {
			return err
		}
	}
	return nil
}

// tasks returns the v1 tasks files the starter thread joins for the fork
// and those it returns to after it.
func (c *cgroup) tasks() (join, back []string) {
	for ctl, dir := range c.v1 {
		join = append(join, filepath.Join(dir, "tasks"))
		back = append(back, filepath.Join(c.cg.v1Own[ctl], "tasks"))
	}
	return join, back
}

// started tightens the v1 pids limit once the starter thread left.
func (c *cgroup) started() error {
	if dir, ok := c.v1[ctlPids]; ok {
		return writeFile(filepath.Join(dir, "pids.max"), pidsMax(c.cg.limits.Pids))
	}
	return nil
}

// pidMaxLimit is the kernel's most processes (PID_MAX_LIMIT on 64-bit):
// pids.max refuses a number above it.
const pidMaxLimit = 4 << 20

// pidsMax renders a pids limit for pids.max: "max" past pidMaxLimit,
// where no number is taken and none could be reached.
func pidsMax(n int64) string {
	if n > pidMaxLimit {
		return "max"
	}
	return strconv.FormatInt(n, 10)
}

// oomCountWait bounds the wait for the OOM kill count of a cgroup whose
// memory reached its limit: the kernel counts the kill after it sent the
// SIGKILL, so the host may see the death first.
const oomCountWait = 200 * time.Millisecond

// memoryLimitHit reports whether the OOM killer killed a process of the
// cgroup for its memory limit: the OOM kill count (v2 memory.events, v1
// memory.oom_control) once the memory use reached the limit (v2
// memory.events' max count, v1 memory.max_usage_in_bytes).
func (c *cgroup) memoryLimitHit() bool {
	limit := c.cg.limits.MemoryBytes
	if limit == 0 {
		return false
	}
	var reached func() bool
	var count func() int64
	if dir, ok := c.v1[ctlMemory]; ok {
		reached = func() bool {
			peak, _ := readInt(filepath.Join(dir, "memory.max_usage_in_bytes"))
			return peak >= limit
		}
		count = func() int64 {
			n, _ := keyed(filepath.Join(dir, "memory.oom_control"), "oom_kill")
			return n
		}
	} else if c.v2 != "" {
		reached = func() bool {
			n, _ := keyed(filepath.Join(c.v2, "memory.events"), "max")
			return n > 0
		}
		count = func() int64 {
			n, _ := keyed(filepath.Join(c.v2, "memory.events"), "oom_kill")
			return n
		}
	} else {
		return false
	}
	if count() > 0 {
		return true
	}
	if !reached() {
		return false
	}
	for deadline := time.Now().Add(oomCountWait); time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		if count() > 0 {
			return true
		}
	}
	return false
}

func readInt(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// populated reports whether a process is left in the unified cgroup dir
// or below it.
func populated(dir string) bool {
	n, ok := keyed(filepath.Join(dir, "cgroup.events"), "populated")
	return ok && n != 0
}

// procs lists the pids in dir's cgroup.procs.
func procs(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// sweep kills everything in the child's unified cgroup and reaps the
// zombies of it the process adopted, until none is left or sweepLimit
// passed. It reports the processes it killed and those left.
func (c *cgroup) sweep() (killed, left int) {
	self := os.Getpid()
	if populated(c.v2) {
		killed = countProcs(c.v2)
		writeFile(filepath.Join(c.v2, "cgroup.kill"), "1")
	}
	deadline := time.Now().Add(sweepLimit)
	for {
		zombies := 0
		for _, st := range zombieChildren(self) {
			if !inCgroup(st.pid, c.v2Rel) {
				continue
			}
			zombies++
			reapPID(st.pid, st.start)
		}
		busy := populated(c.v2)
		if !busy && zombies == 0 && !strayZombie(c.v2Rel) {
			return killed, 0
		}
		if time.Now().After(deadline) {
			return killed, countProcs(c.v2) + zombies
		}
		if busy {
			writeFile(filepath.Join(c.v2, "cgroup.kill"), "1") // what forked before the first kill landed
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// strayZombie reports whether a zombie of the unified cgroup rel (or one
// below it) is left, self's or not yet self's. The cgroup counts as empty
// once every task exited, which the kernel marks before it hands an
// exited process's children to the subreaper: a zombie whose parent died
// in the same kill may still be on its way to self, or have reached it
// after the sweep's last look at self's children; the sweep goes round
// again for it.
// Only zombies have their cgroup read, so the scan costs one stat read
// per process on the machine.
func strayZombie(rel string) bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, ok := readStat(pid)
		if !ok || st.state != 'Z' && st.state != 'X' {
			continue
		}
		if inCgroup(pid, rel) {
			return true
		}
	}
	return false
}

// countProcs counts the processes in the cgroup dir and below it.
func countProcs(dir string) int {
	n := 0
	for _, d := range tree(dir) {
		n += len(procs(d))
	}
	return n
}

// inCgroup reports whether /proc/pid/cgroup puts pid in the unified
// cgroup rel or a cgroup below it (a zombie's still does; the child may
// make cgroups in its own and move its processes there).
func inCgroup(pid int, rel string) bool {
	p, ok := unifiedCgroup(pid)
	return ok && within(p, rel)
}

// unifiedCgroup returns pid's cgroup path in the unified hierarchy, as
// /proc/PID/cgroup writes it.
func unifiedCgroup(pid int) (string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return "", false
	}
	for line := range strings.Lines(string(b)) {
		if p, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "0::"); ok {
			return p, true
		}
	}
	return "", false
}

// within reports whether the cgroup path p is rel or below it.
func within(p, rel string) bool {
	rest, ok := strings.CutPrefix(p, rel)
	return ok && (rest == "" || rest[0] == '/')
}

// tree lists the cgroup directory dir and every cgroup below it, the
// deepest first, so that each can be removed in that order. A child may
// make cgroups in its own: its directories belong to the host's user,
// which the child may be.
func tree(dir string) []string {
	var out []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, tree(filepath.Join(dir, e.Name()))...)
		}
	}
	return append(out, dir)
}

// remove removes the child's directories; the processes in them are gone
// by then (sweep).
func (c *cgroup) remove() error {
	var first error
	rm := func(dir string) {
		if dir == "" {
			return
		}
		for _, d := range tree(dir) { // the cgroups the child made below its own first
			err := os.Remove(d)
			for i := 0; errors.Is(err, unix.EBUSY) && i < 50; i++ {
				// A v1 cgroup may lag the unified one by the time its last
				// task takes to finish exiting.
				time.Sleep(2 * time.Millisecond)
				err = os.Remove(d)
			}
			if err != nil && !errors.Is(err, fs.ErrNotExist) && first == nil {
				first = fmt.Errorf("contain: removing a child's cgroup: %s", errText(err))
			}
		}
	}
	rm(c.v2)
	for _, dir := range c.v1 {
		rm(dir)
	}
	return first
}

// sweepLeftovers removes, under parent, the directories of Sets whose
// process is gone: kills what is in them (killV2: through cgroup.kill;
// in a v1 hierarchy: each process its cgroup.procs lists, as the unified
// hierarchy is not there to do it), then removes every child's directory
// and the Set's. A Set's process is gone when its pid names no process,
// or one with another start time.
func sweepLeftovers(parent string, killV2 bool, log *slog.Logger) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, start, ok := parseSetName(e.Name())
		if !ok || !e.IsDir() {
			continue
		}
		if st, alive := readStat(pid); alive && st.start == start && st.state != 'Z' {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		lock, err := os.Open(dir)
		if err != nil {
			continue
		}
		if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			lock.Close() // its host is alive, in another pid namespace
			continue
		}
		if killV2 {
			writeFile(filepath.Join(dir, "cgroup.kill"), "1")
		}
		deadline := time.Now().Add(sweepLimit)
		for {
			subs, _ := os.ReadDir(dir)
			left := 0
			for _, s := range subs {
				if !s.IsDir() {
					continue
				}
				for _, sub := range tree(filepath.Join(dir, s.Name())) {
					for _, p := range procs(sub) {
						if st, ok := readStat(p); ok {
							killPID(p, st.start)
						}
					}
					if os.Remove(sub) != nil {
						left++
					}
				}
			}
			if left == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := os.Remove(dir); err == nil {
			log.Info("removed a cgroup left by a host that is gone", "dir", dir)
		} else {
			log.Warn("contain: cannot remove a cgroup left by a host that is gone", "dir", dir, "err", errText(err))
		}
		lock.Close() // after the removal: another sweep never takes it unlocked
	}
}

// parseSetName parses a Set directory's name: hostPrefix, pid, "-",
// start time, "-", eight hex digits.
func parseSetName(name string) (pid int, start uint64, ok bool) {
	rest, ok := strings.CutPrefix(name, hostPrefix)
	if !ok {
		return 0, 0, false
	}
	f := strings.Split(rest, "-")
	if len(f) != 3 || len(f[2]) != 8 {
		return 0, 0, false
	}
	if _, err := hex.DecodeString(f[2]); err != nil {
		return 0, 0, false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 0 {
		return 0, 0, false
	}
	start, err = strconv.ParseUint(f[1], 10, 64)
	return pid, start, err == nil
}
