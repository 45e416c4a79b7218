package host

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"syscall"
	"time"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/internal/toolschema"
	"github.com/skulkrt/skulk/wire"
	"go.opentelemetry.io/otel/trace"
)

// The values of zero Config and RestartPolicy fields, as each field's doc
// states them (TestConfigDefaults holds the two together).
const (
	defaultHealthInterval = time.Second
	defaultHealthTimeout  = 5 * time.Second
	defaultIdleHealth     = 30 * time.Second
	defaultStartTimeout   = 10 * time.Second
	defaultCancelGrace    = time.Second
	defaultEndGrace       = 2 * time.Second
	defaultKillGrace      = 2 * time.Second
	defaultDrainGrace     = 5 * time.Second
	defaultMaxRestarts    = 5
	defaultRestartWindow  = time.Minute
	defaultBackoffMin     = 100 * time.Millisecond
	defaultBackoffMax     = 10 * time.Second
)

// deadlineGrace is added to cancel_grace before a call past its deadline
// gets a synthetic timeout (docs/protocol.md §7, "Deadlines":
// cancel_grace_ms + 1 s).
const deadlineGrace = time.Second

// maxPoolSize bounds Config.PoolSize.
const maxPoolSize = 1024

// Config configures a Host: the child command, its environment and the
// supervision policy. It is shaped on os/exec.Cmd: fields configure, Start
// runs. Every zero value has a documented meaning, so Config{Command: path}
// is a valid configuration. A Config must not be modified after Start.
type Config struct {
	// Command is the program to run as a child; it is looked up in PATH
	// when it contains no slash (as exec.Command does). Required.
	Command string
	// Args are the arguments after the program name; nil means none.
	Args []string
	// Dir is the child's working directory; "" means the host's.
	Dir string
	// Env is an allow-list of variable names passed through from the
	// host's environment; names the host does not have are skipped. nil
	// means the default: PATH, HOME, USER, LANG, LC_ALL, TZ and TMPDIR,
	// the same default skulk-host uses; an empty, non-nil list passes
	// nothing, so the child sees only ExtraEnv and the SKULK_* variables.
	// To add a variable to the default, set it in ExtraEnv (with the
	// host's value, os.Getenv, to pass it through).
	Env []string
	// ExtraEnv are "NAME=value" pairs always set in the child's
	// environment. The SKULK_* variables of docs/protocol.md §1 override them.
	ExtraEnv []string
	// PoolSize is how many children run the command; 0 means 1.
	PoolSize int
	// Limits are the host's packet limits; the zero Limits means the
	// protocol defaults. The handshake agrees on the smaller of both
	// sides' limits.
	Limits wire.Limits
	// HealthInterval is how often each child is pinged; 0 means 1 s.
	HealthInterval time.Duration
	// HealthTimeout is how long a child may go without a pong before it is
	// declared dead; 0 means 5 s. It must exceed HealthInterval.
	HealthTimeout time.Duration
	// IdleHealthInterval is how often a child with no call in flight is
	// pinged (docs/operations.md, Health); 0 means 30 s, and a value below
	// HealthInterval means HealthInterval (every child pinged alike). A
	// call routed to a child not pinged for a HealthInterval pings it at
	// once, so the call is watched as on a child that was busy.
	IdleHealthInterval time.Duration
	// StartTimeout bounds a child's start up to its hello; 0 means 10 s.
	StartTimeout time.Duration
	// CancelGrace is the child's cancel_grace_ms: how long a cancelled
	// handler may run before the child reports it stuck; 0 means 1 s. A
	// call past its deadline gets a synthetic timeout after the deadline
	// plus CancelGrace plus 1 s.
	CancelGrace time.Duration
	// KillGrace is the time between SIGTERM and SIGKILL when a child is
	// stopped; 0 means 2 s.
	KillGrace time.Duration
	// DrainGrace is the drain's grace_ms: how long running calls may go on
	// after a drain (Close, recycle) before the child cancels them; 0
	// means 5 s. Close shortens it to fit its context's deadline.
	DrainGrace time.Duration
	// StuckLimit recycles a child gracefully once its pong reports this
	// many stuck handlers; 0 means 1, a negative value means never.
	StuckLimit int
	// Restart is the restart policy for children that die.
	Restart RestartPolicy
	// TempDir is where each child's private 0700 directory is created;
	// "" means os.TempDir(). Keep it short: a Unix socket path holds at
	// most 107 bytes, so TempDir (or os.TempDir()) may have at most 72.
	// A host removes, once as it starts, the private directories under it
	// that hosts which exited without Close (killed with SIGKILL, say)
	// left behind (docs/operations.md).
	TempDir string
	// Logger receives the children's stdout and stderr line by line and
	// the host's own events; nil means discard. A line of a child's output
	// is a record of level Info with the message "child output" and the
	// attributes child (its id), pid, stream ("stdout" or "stderr") and
	// line; every other record is one of the host's own events, the call
	// log's warnings among them (an observer failed or fell behind, a
	// journal writer stopped; their messages start "calllog:"). A child's
	// lines are forwarded at most 1,000 at once, then 200 a second; a
	// warning "child output dropped" with the attribute dropped counts
	// the others (docs/operations.md, "Logs").
	Logger *slog.Logger
	// NoSubreaper, on Linux, keeps the host process from becoming a child
	// subreaper (PR_SET_CHILD_SUBREAPER). The flag belongs to the whole
	// process: while a Host without NoSubreaper runs, every orphaned
	// descendant of any process this program started (not only of the
	// children) becomes the program's child instead of init's, and the
	// host reaps only those that come from its children (in a child's
	// cgroup, or without cgroups named by the rules of
	// docs/operations.md, "Containment"), each as it exits (asking for
	// SIGCHLD with os/signal.Notify, which leaves the program's own
	// channels and os/exec alone). A program
	// that starts other processes whose descendants outlive their parents
	// reaps those orphans itself, or sets NoSubreaper: the host still
	// finds and kills its children's descendants (docs/operations.md,
	// "Hostile children"), leaving orphans to init. False means the host
	// is a subreaper from Start until the last such Host is closed.
	NoSubreaper bool
	// MemoryMax caps, in bytes, the memory each child may use together
	// with everything it starts (its cgroup's memory.max, or v1's
	// memory.limit_in_bytes). Past it the kernel kills the child; its
	// calls fail with a synthetic unreachable that says the memory limit
	// was reached (ErrMemoryLimit), and it is restarted like any child
	// that dies. 0 means no limit. Limits need cgroups (Linux): where the
	// controller is not available, Start fails with ErrLimitUnavailable.
	MemoryMax int64
	// PidsMax caps the processes and threads each child may have together
	// with everything it starts (pids.max): a fork past it fails. 0 means
	// no limit. Needs cgroups, as MemoryMax.
	PidsMax int64
	// CPUMax caps each child's CPU time, with everything it starts, in
	// cores: 1.5 is one and a half cores (systemd's CPUQuota=150%). 0
	// means no limit. Needs cgroups, as MemoryMax.
	CPUMax float64
	// NoCgroups, on Linux, starts the children without cgroups of their
	// own even where the host could make them: the parent-death signal,
	// the subreaper, the guardian and /proc alone contain them
	// (docs/operations.md, "Containment"). It cannot go with a limit.
	// False means a cgroup per child wherever the host can create one.
	NoCgroups bool
	// User runs every child as this user, a name or a numeric uid; its
	// supplementary groups are dropped. "" means the host's user. Running
	// as another user needs the privilege to change user (root, or
	// CAP_SETUID and CAP_SETGID); the command must be executable by it.
	User string
	// Group runs every child with this group, a name or a numeric gid;
	// "" means User's primary group, or the host's group without User.
	Group string
	// NoNewPrivs, on Linux, starts every child with no_new_privs: neither
	// it nor anything it runs gains privileges from set-user-ID or
	// set-group-ID programs or file capabilities. False leaves the flag as
	// the host process has it.
	NoNewPrivs bool
	// CallLog configures the call log every call is recorded in
	// (docs/events.md): the host's observers and journal, what they are
	// given of payloads, and how many events a call keeps for Call.Events.
	// The zero value records every call for its watchers only. The host
	// writes the log and stops its observers and journal writers in Close.
	CallLog calllog.Options
	// TracerProvider gives the tracer of the host's spans: a client span
	// per call of a known tool, whose W3C trace context (traceparent,
	// tracestate, baggage) goes in the invoke's trace map and whose ids
	// every event of the call carries (calllog.Event.TraceID and SpanID), and a root
	// span per child restart, recycle and drain (docs/operations.md,
	// "Traces"). nil means the global provider (otel.SetTracerProvider);
	// while no program set one, the host starts no span and sends no trace
	// context of its own.
	TracerProvider trace.TracerProvider
	// Calls says what the children may call through the host
	// (docs/protocol.md §8): host-side tools and tools of the host's own
	// children, each named. The zero value offers nothing: a child's call
	// is refused by its SDK before anything is sent.
	Calls Calls

	// endGrace is how long the host waits for a child's end after the
	// provider terminal before it closes the connection instead of
	// reusing it (docs/operations.md, "End grace"); 0 means 2 s. Only the
	// package's tests shorten it.
	endGrace time.Duration
}

// Calls configures the calls a host's children may make through it.
type Calls struct {
	// Tools names tools of the host's children (its own pool's) a child
	// may call, routed like any Host.Call. Nil offers none.
	Tools []string
	// HostTools are tools the host runs itself, in Go, for its children;
	// every one is offered. Their ids must differ from each other and
	// from Tools.
	HostTools []HostTool
	// MaxDepth is the deepest a call a child makes may sit in its tree
	// (the outermost call is at depth 0); a deeper one is refused, and the
	// child answered failed invalid_frame. 0 means 8; at most 64.
	MaxDepth int
	// MaxInFlight bounds the calls one child may have open through the
	// host at once; one over it is refused, and the child answered failed
	// invalid_frame. 0 means 16.
	MaxInFlight int
	// DetachedTimeout is the deadline of a detached call a child makes
	// (docs/protocol.md §8 item 7) that gives no timeout_ms, and the
	// longest one may ask for: a detached call outlives the handler that
	// made it, so without a ceiling nothing would ever end it. A longer
	// timeout_ms is cut to it. 0 means 10 minutes; negative
	// is refused. Calls that are steps of their parent have the parent's
	// deadline instead.
	DetachedTimeout time.Duration
}

// Defaults and ceilings of Calls.
const (
	defaultMaxDepth        = 8
	maxDepthCeiling        = 64
	defaultMaxInFlight     = 16
	defaultDetachedTimeout = 10 * time.Minute
	maxInFlightCeiling     = 1 << 16
)

// offers reports whether c offers anything.
func (c *Calls) offers() bool { return len(c.Tools) > 0 || len(c.HostTools) > 0 }

func (c *Calls) validate() error {
	switch {
	case c.MaxDepth < 0 || c.MaxDepth > maxDepthCeiling:
		return configErr("Calls.MaxDepth", fmt.Sprintf("must be 0..%d", maxDepthCeiling))
	case c.MaxInFlight < 0 || c.MaxInFlight > maxInFlightCeiling:
		return configErr("Calls.MaxInFlight", fmt.Sprintf("must be 0..%d", maxInFlightCeiling))
	case c.DetachedTimeout < 0:
		return configErr("Calls.DetachedTimeout", "must not be negative")
	}
	seen := map[string]bool{}
	for i, id := range c.Tools {
		if protocol.CheckCallID(id) != nil {
			return configErr(fmt.Sprintf("Calls.Tools[%d]", i), "not a valid tool id")
		}
		seen[id] = true
	}
	for i, t := range c.HostTools {
		field := fmt.Sprintf("Calls.HostTools[%d]", i)
		switch {
		case protocol.CheckCallID(t.Tool.ID) != nil:
			return configErr(field+".Tool.ID", "not a valid tool id")
		case seen[t.Tool.ID]:
			return configErr(field+".Tool.ID", "offered twice")
		case t.Run == nil:
			return configErr(field+".Run", "required")
		}
		seen[t.Tool.ID] = true
	}
	if _, err := toolschema.NewCatalog(hostToolList(c.HostTools)); err != nil {
		return configErr("Calls.HostTools", "a schema does not compile: "+err.Error())
	}
	return nil
}

// RestartPolicy says how a pool restarts children that die: after a
// backoff that doubles from BackoffMin up to BackoffMax with each restart
// within Window, each wait drawn from the upper half of its step (the
// first is half BackoffMin to BackoffMin), giving up once MaxRestarts
// restarts happened within Window. A slot that gave up stays down; the
// pool is down when every slot is. Graceful recycles (stuck handlers) are
// not counted.
type RestartPolicy struct {
	// MaxRestarts is how many restarts are allowed within Window; 0 means
	// 5, a negative value means the child is never restarted.
	MaxRestarts int
	// Window is the sliding window restarts are counted in; 0 means 1 min.
	Window time.Duration
	// BackoffMin is the first backoff step (its wait is half of it to all
	// of it); 0 means 100 ms.
	BackoffMin time.Duration
	// BackoffMax caps the backoff; 0 means 10 s.
	BackoffMax time.Duration
}

// minMemoryMax is the smallest Config.MemoryMax: below it no program
// starts.
const minMemoryMax = 1 << 20

// credential resolves User and Group; nil means the host's own.
func (c *Config) credential() (*syscall.Credential, error) {
	if c.User == "" && c.Group == "" {
		return nil, nil
	}
	cred := &syscall.Credential{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())}
	if c.User != "" {
		u, err := user.Lookup(c.User)
		if err != nil {
			if _, numErr := strconv.ParseUint(c.User, 10, 32); numErr == nil {
				u, err = user.LookupId(c.User)
			}
		}
		if err != nil {
			return nil, configErr("User", "no such user")
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			return nil, configErr("User", "not a numeric uid and gid")
		}
		cred.Uid, cred.Gid = uint32(uid), uint32(gid)
	}
	if c.Group != "" {
		g, err := user.LookupGroup(c.Group)
		if err != nil {
			if _, numErr := strconv.ParseUint(c.Group, 10, 32); numErr == nil {
				g, err = user.LookupGroupId(c.Group)
			}
		}
		if err != nil {
			return nil, configErr("Group", "no such group")
		}
		gid, err := strconv.ParseUint(g.Gid, 10, 32)
		if err != nil {
			return nil, configErr("Group", "not a numeric gid")
		}
		cred.Gid = uint32(gid)
	}
	return cred, nil
}

// ErrConfig is matched (errors.Is) by every error of the config check Start makes.
var ErrConfig = errors.New("host: invalid config")

func configErr(field, reason string) error {
	return fmt.Errorf("%w: %s: %s", ErrConfig, field, reason)
}

// validate reports the first field of c that makes no sense. The error
// matches ErrConfig.
func (c *Config) validate() error {
	durations := []struct {
		name string
		v    time.Duration
	}{
		{"HealthInterval", c.HealthInterval}, {"HealthTimeout", c.HealthTimeout},
		{"IdleHealthInterval", c.IdleHealthInterval},
		{"StartTimeout", c.StartTimeout}, {"CancelGrace", c.CancelGrace},
		{"KillGrace", c.KillGrace}, {"DrainGrace", c.DrainGrace},
		{"Restart.Window", c.Restart.Window}, {"Restart.BackoffMin", c.Restart.BackoffMin},
		{"Restart.BackoffMax", c.Restart.BackoffMax},
	}
	for _, d := range durations {
		if d.v < 0 {
			return configErr(d.name, "negative")
		}
	}
	n := c.withDefaults()
	switch {
	case c.Command == "":
		return configErr("Command", "required")
	case c.PoolSize < 0 || c.PoolSize > maxPoolSize:
		return configErr("PoolSize", fmt.Sprintf("must be 0..%d", maxPoolSize))
	case n.HealthTimeout <= n.HealthInterval:
		return configErr("HealthTimeout", "must exceed HealthInterval")
	case n.HealthInterval < time.Millisecond:
		return configErr("HealthInterval", "below 1 ms")
	case n.CancelGrace < time.Millisecond:
		return configErr("CancelGrace", "below 1 ms")
	case n.Restart.BackoffMax < n.Restart.BackoffMin:
		return configErr("Restart.BackoffMax", "below BackoffMin")
	case c.CallLog.Journal != nil && c.CallLog.Journal.Store == nil:
		return configErr("CallLog.Journal.Store", "required")
	case c.MemoryMax < 0:
		return configErr("MemoryMax", "negative")
	case c.MemoryMax > 0 && c.MemoryMax < minMemoryMax:
		return configErr("MemoryMax", "below 1 MiB")
	case c.PidsMax < 0:
		return configErr("PidsMax", "negative")
	case c.CPUMax < 0 || c.CPUMax != c.CPUMax:
		return configErr("CPUMax", "negative or not a number")
	case c.CPUMax > 0 && c.CPUMax < 0.01:
		return configErr("CPUMax", "below 0.01 cores")
	case c.NoCgroups && (c.MemoryMax > 0 || c.PidsMax > 0 || c.CPUMax > 0):
		return configErr("NoCgroups", "limits need cgroups")
	}
	if _, err := c.credential(); err != nil {
		return err
	}
	if err := c.Calls.validate(); err != nil {
		return err
	}
	if err := checkTempBase(c.tempBase()); err != nil {
		return err
	}
	for i, k := range c.CallLog.Redact {
		if k == "" {
			return configErr(fmt.Sprintf("CallLog.Redact[%d]", i), "empty key")
		}
	}
	if j := c.CallLog.Journal; j != nil && (j.Queue < 0 || j.QueueBytes < 0) {
		return configErr("CallLog.Journal", "Queue and QueueBytes must not be negative")
	}
	for i, kv := range c.ExtraEnv {
		if !validEnvPair(kv) {
			return configErr(fmt.Sprintf("ExtraEnv[%d]", i), "not NAME=value")
		}
	}
	return nil
}

func validEnvPair(kv string) bool {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return i > 0
		}
	}
	return false
}

// defaultEnv is what a nil Config.Env passes through: enough for a child
// to find programs, its home, its locale, its time zone and a temporary
// directory, and nothing that carries a secret by convention.
var defaultEnv = []string{"PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR"}

// withDefaults returns c with zero fields replaced by their defaults.
func (c Config) withDefaults() Config {
	if c.Env == nil {
		c.Env = defaultEnv
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.PoolSize == 0 {
		c.PoolSize = 1
	}
	c.Limits = packetio.Effective(c.Limits)
	def(&c.HealthInterval, defaultHealthInterval)
	def(&c.HealthTimeout, defaultHealthTimeout)
	def(&c.IdleHealthInterval, defaultIdleHealth)
	c.IdleHealthInterval = max(c.IdleHealthInterval, c.HealthInterval) // at least HealthInterval, the default too
	def(&c.StartTimeout, defaultStartTimeout)
	def(&c.CancelGrace, defaultCancelGrace)
	def(&c.endGrace, defaultEndGrace)
	def(&c.KillGrace, defaultKillGrace)
	def(&c.DrainGrace, defaultDrainGrace)
	def(&c.Restart.Window, defaultRestartWindow)
	def(&c.Restart.BackoffMin, defaultBackoffMin)
	def(&c.Restart.BackoffMax, defaultBackoffMax)
	if c.Restart.MaxRestarts == 0 {
		c.Restart.MaxRestarts = defaultMaxRestarts
	}
	if c.StuckLimit == 0 {
		c.StuckLimit = 1
	}
	if c.Calls.MaxDepth == 0 {
		c.Calls.MaxDepth = defaultMaxDepth
	}
	if c.Calls.MaxInFlight == 0 {
		c.Calls.MaxInFlight = defaultMaxInFlight
	}
	def(&c.Calls.DetachedTimeout, defaultDetachedTimeout)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}
