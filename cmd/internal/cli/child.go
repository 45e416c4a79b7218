package cli

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/wire"
)

// closeTimeout bounds the child's shutdown when a command ends, and mcp
// serve's wait on stdio for the answers to the requests it read before its
// input ended (docs/mcp.md).
const closeTimeout = 10 * time.Second

// drainGrace is the drain's grace when a command ends: its calls are over
// by then (they have their terminals), so a handler still running has had
// its cancellation and gets only this, plus the cancel grace, before the
// child is abandoned to its signals.
const drainGrace = 500 * time.Millisecond

// envFlag collects repeated --env NAME and --env NAME=VALUE flags.
type envFlag struct {
	pass  []string // NAME: passed through from the host
	extra []string // NAME=VALUE: set in the child
}

func (e *envFlag) String() string { return "" }

// childExtraEnv is the child's Config.ExtraEnv: each --env NAME the host
// has, with the host's value, then each --env NAME=VALUE, on top of the
// default environment a nil Config.Env passes.
func (e *envFlag) childExtraEnv() []string {
	env := make([]string, 0, len(e.pass)+len(e.extra))
	for _, name := range e.pass {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	return append(env, e.extra...)
}

func (e *envFlag) Set(v string) error {
	name, _, hasValue := strings.Cut(v, "=")
	if name == "" {
		return errors.New("want NAME or NAME=VALUE")
	}
	if hasValue {
		e.extra = append(e.extra, v)
	} else {
		e.pass = append(e.pass, name)
	}
	return nil
}

// childFlags are the flags every command that starts a child has.
type childFlags struct {
	env     envFlag
	verbose bool
	contain containFlags
}

func (c *childFlags) register(fs *flag.FlagSet) {
	fs.Var(&c.env, "env", "")
	fs.BoolVar(&c.verbose, "v", false, "")
	c.contain.register(fs)
}

// containFlags are the children's limits and privileges
// (docs/operations.md, "Containment").
type containFlags struct {
	memoryMax  sizeFlag
	pidsMax    uint64
	cpuMax     percentFlag
	user       string
	group      string
	noNewPrivs bool
	noCgroups  bool
}

func (c *containFlags) register(fs *flag.FlagSet) {
	fs.Var(&c.memoryMax, "memory-max", "")
	fs.Uint64Var(&c.pidsMax, "pids-max", 0, "")
	fs.Var(&c.cpuMax, "cpu-max", "")
	fs.StringVar(&c.user, "user", "", "")
	fs.StringVar(&c.group, "group", "", "")
	fs.BoolVar(&c.noNewPrivs, "no-new-privs", false, "")
	fs.BoolVar(&c.noCgroups, "no-cgroups", false, "")
}

// apply sets the host configuration's limits and privileges.
func (c *containFlags) apply(cfg *host.Config) {
	cfg.MemoryMax, cfg.PidsMax, cfg.CPUMax = int64(c.memoryMax), int64(min(c.pidsMax, 1<<62)), float64(c.cpuMax)
	cfg.User, cfg.Group, cfg.NoNewPrivs, cfg.NoCgroups = c.user, c.group, c.noNewPrivs, c.noCgroups
}

// sizeFlag is a size in bytes written as systemd and docker write them:
// a number of bytes, or a number with K, M, G or T (powers of 1024; a
// trailing B or iB is allowed: 512K, 128MiB, 2G).
type sizeFlag int64

func (s *sizeFlag) String() string { return strconv.FormatInt(int64(*s), 10) }

func (s *sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s = sizeFlag(n)
	return nil
}

// errSize is the error of a size that does not parse.
var errSize = errors.New("want a size such as 512K, 128M, 2G or a number of bytes")

// parseSize parses a sizeFlag's text.
func parseSize(v string) (int64, error) {
	t := strings.TrimSpace(v)
	t = strings.TrimSuffix(strings.TrimSuffix(t, "iB"), "B")
	shift := 0
	if t != "" {
		switch t[len(t)-1] {
		case 'K', 'k':
			shift = 10
		case 'M', 'm':
			shift = 20
		case 'G', 'g':
			shift = 30
		case 'T', 't':
			shift = 40
		}
		if shift > 0 {
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)>>shift {
		return 0, errSize
	}
	return n << shift, nil
}

// percentFlag is a CPU share written as systemd's CPUQuota: "150%" is one
// and a half cores; the % may be left out. It holds cores.
type percentFlag float64

func (p *percentFlag) String() string {
	return strconv.FormatFloat(float64(*p)*100, 'f', -1, 64) + "%"
}

func (p *percentFlag) Set(v string) error {
	f, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), "%"), 64)
	if err != nil || f < 0 || f > 1e6 || f != f {
		return errors.New("want a percentage of one core such as 50% or 150%")
	}
	*p = percentFlag(f / 100)
	return nil
}

// config returns the host configuration that runs the command line argv.
func (c *childFlags) config(argv []string, env Env) host.Config {
	cfg := host.Config{
		Command:    argv[0],
		Args:       argv[1:],
		ExtraEnv:   c.env.childExtraEnv(),
		DrainGrace: drainGrace,
	}
	c.contain.apply(&cfg)
	// The child's stdout and stderr are forwarded line by line, tagged
	// with its id and pid (docs/protocol.md §1), always; -v adds the host's own
	// events.
	var h slog.Handler = slog.NewTextHandler(env.Stderr, nil)
	if !c.verbose {
		h = childOutputOnly{h}
	}
	cfg.Logger = slog.New(outputSeen{h, new(atomic.Bool)})
	return cfg
}

// outputSeen passes every record on and notes whether one forwarded a
// line of a child's output, so that a failure to start can say whether
// the child's own words are above it (see startHost).
type outputSeen struct {
	slog.Handler
	seen *atomic.Bool // shared by the handlers derived with WithAttrs and WithGroup
}

func (h outputSeen) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == childOutputMessage {
		h.seen.Store(true)
	}
	return h.Handler.Handle(ctx, r)
}

func (h outputSeen) WithAttrs(as []slog.Attr) slog.Handler {
	return outputSeen{h.Handler.WithAttrs(as), h.seen}
}

func (h outputSeen) WithGroup(name string) slog.Handler {
	return outputSeen{h.Handler.WithGroup(name), h.seen}
}

// childWrote reports whether the child of a host configured by
// childFlags.config wrote a line of output so far.
func childWrote(cfg host.Config) bool {
	if cfg.Logger == nil {
		return false
	}
	h, ok := cfg.Logger.Handler().(outputSeen)
	return ok && h.seen.Load()
}

// childOutputOnly passes on the records that forward a child's output
// (the message host.Config.Logger names) and drops the host's other
// events: the log of a command run without -v.
type childOutputOnly struct{ slog.Handler }

// childOutputMessage is the message of the host's records of a child's
// output line (documented at host.Config.Logger).
const childOutputMessage = "child output"

func (h childOutputOnly) Handle(ctx context.Context, r slog.Record) error {
	if r.Message != childOutputMessage {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h childOutputOnly) WithAttrs(as []slog.Attr) slog.Handler {
	return childOutputOnly{h.Handler.WithAttrs(as)}
}

func (h childOutputOnly) WithGroup(name string) slog.Handler {
	return childOutputOnly{h.Handler.WithGroup(name)}
}

// startHost starts the child of argv and waits for its handshake. Its error
// ends the command with ExitStart.
func startHost(ctx context.Context, cfg host.Config) (*host.Host, error) {
	// Look the program up first: "not found" deserves its own clear line.
	if _, err := exec.LookPath(cfg.Command); err != nil {
		hint := "give the path of the provider program"
		if !strings.Contains(cfg.Command, "/") {
			hint = "check that the program is in PATH, or give its path"
		}
		return nil, statusErr(ExitStart, "could not start the child: %v (%s)", err, hint)
	}
	h, err := host.Start(ctx, cfg)
	if err != nil && ctx.Err() != nil {
		return nil, statusErr(ExitCancelled, "interrupted while the child was starting")
	}
	if errors.Is(err, host.ErrLimitUnavailable) {
		return nil, statusErr(ExitStart, "could not start the child: %v (docs/operations.md, \"Containment\", says what each limit needs)", err)
	}
	if errors.Is(err, host.ErrConfig) {
		return nil, statusErr(ExitStart, "could not start the child: %v", err)
	}
	if err != nil {
		output := "it wrote nothing"
		if childWrote(cfg) {
			output = "its output is above"
		}
		return nil, statusErr(ExitStart, "could not start the child %s: %v (check the command line after -- and that the program is a Skulk provider; %s, and -v adds the host's events)", cfg.Command, err, output)
	}
	return h, nil
}

// closeHost stops the host's children, bounded by closeTimeout, and cut
// short by Ctrl-C or SIGTERM (a second one, when the first ended the
// call): the children are then stopped with signals at once instead of
// being given the rest of their drain.
func closeHost(h *host.Host) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	_ = h.Close(ctx) // the command's outcome is already decided; -v logs the details
}

// refusal maps an error of host.Call to the command's error.
func refusal(tool string, err error) error {
	var se *host.SchemaError
	var ce *frame.Error
	switch {
	case errors.Is(err, host.ErrUnknownTool):
		return statusErr(ExitRefused, "the child has no tool %q (run 'skulk-host tools -- CHILD' to list them)", tool)
	case errors.As(err, &se):
		return statusErr(ExitRefused, "call refused: %v (run 'skulk-host tools -- CHILD' to see the schema)", err)
	case errors.Is(err, wire.ErrTooLarge):
		return statusErr(ExitRefused, "call refused: %v (the arguments or an input line are larger than the child's max_header, or media than its max_attachment)", err)
	case errors.Is(err, host.ErrPoolDown):
		return statusErr(ExitUnreachable, "call refused: %v", err)
	case errors.As(err, &ce):
		// The child went away as the call started (a synthetic
		// unreachable or transport_error): the status of that terminal.
		return statusErr(ExitForCode(ce.Code), "call failed: %v", err)
	}
	return statusErr(ExitFailure, "call failed: %v", err)
}
