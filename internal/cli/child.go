package cli

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/wire"
)

// defaultPassEnv are the host variables every child sees: enough for an
// interpreter or a shell script to find its tools and locale.
var defaultPassEnv = []string{"PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR"}

// closeTimeout bounds the child's shutdown when a command ends.
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
}

func (c *childFlags) register(fs *flag.FlagSet) {
	fs.Var(&c.env, "env", "")
	fs.BoolVar(&c.verbose, "v", false, "")
}

// config returns the host configuration that runs the command line argv.
func (c *childFlags) config(argv []string, env Env) host.Config {
	cfg := host.Config{
		Command:    argv[0],
		Args:       argv[1:],
		Env:        append(append([]string(nil), defaultPassEnv...), c.env.pass...),
		ExtraEnv:   c.env.extra,
		DrainGrace: drainGrace,
	}
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
	var ce *host.CallError
	switch {
	case errors.Is(err, host.ErrUnknownTool):
		return statusErr(ExitRefused, "the child has no tool %q (run 'skulk-host tools -- CHILD' to list them)", tool)
	case errors.As(err, &se):
		return statusErr(ExitRefused, "call refused: %v (run 'skulk-host tools -- CHILD' to see the schema)", err)
	case errors.Is(err, wire.ErrHeaderLength):
		return statusErr(ExitRefused, "call refused: %v (the arguments or an input line are larger than the child's max_header)", err)
	case errors.Is(err, host.ErrPoolDown):
		return statusErr(ExitUnreachable, "call refused: %v", err)
	case errors.As(err, &ce):
		// The child went away as the call started (a synthetic
		// unreachable or transport_error): the status of that terminal.
		return statusErr(ExitForCode(ce.Code), "call failed: %v", err)
	}
	return statusErr(ExitFailure, "call failed: %v", err)
}
