// Package cli implements the skulk-host command: the guided demo, one-off
// calls, a child's tool catalogue and a benchmark, each a thin layer over
// the host package. cmd/skulk-host only wires Run to the process; nothing
// here is needed by a program that embeds host.
//
// Every command reports errors as one line on stderr that says what to do,
// and ends with an exit status from the table of exit.go (documented in
// docs/cli.md).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/skulkrt/skulk/cmd/internal/termsafe"
)

// Env is the process environment a command runs in.
type Env struct {
	// Stdin is read by call --input -.
	Stdin io.Reader
	// Stdout receives the command's output.
	Stdout io.Writer
	// Stderr receives errors, status lines and the progress line.
	Stderr io.Writer
	// StderrTerminal reports whether Stderr is a terminal; only then does
	// call draw a live progress line.
	StderrTerminal bool
	// StdoutTerminal reports whether Stdout is a terminal; then call
	// escapes the provider's text unless --raw is given.
	StdoutTerminal bool
	// Executable is the path of the running skulk-host binary; demo
	// re-executes it in child mode. Empty makes demo fail with a clear
	// error.
	Executable string
}

// command is one skulk-host command.
type command struct {
	name  string
	usage string // the usage line after "skulk-host "
	short string // one line for the command list
	long  string // the help text after the usage line
	run   func(ctx context.Context, args []string, env Env) error
}

// commands lists the commands in the order help shows them.
func commands() []*command {
	return []*command{
		{name: "demo", usage: demoUsage, short: "run a guided tour against a built-in provider (start here)", long: demoHelp, run: runDemo},
		{name: "call", usage: callUsage, short: "start a child, make one call, stream its output", long: callHelp, run: runCall},
		{name: "serve", usage: serveUsage, short: "serve a child's tools on NATS, for call --via from other machines", long: serveHelp, run: runServe},
		{name: "tools", usage: toolsUsage, short: "list a child's tools with descriptions and schemas", long: toolsHelp, run: runTools},
		{name: "mcp", usage: mcpUsage, short: "serve a child's tools as an MCP server (stdio or streamable HTTP)", long: mcpHelp, run: runMCP},
		{name: "bench", usage: benchUsage, short: "measure throughput, bandwidth and latency against a child", long: benchHelp, run: runBench},
		{name: "asif", usage: asifUsage, short: "export a journal's call tree as an ASIF session; check ASIF documents", long: asifHelp, run: runASIF},
		{name: "follow", usage: followUsage, short: "tail a call tree kept by call --journal, live", long: followHelp, run: runFollow},
		{name: "replay", usage: replayUsage, short: "show what a watcher saw of a call tree kept by call --journal", long: replayHelp, run: runReplay},
		{name: "journal", usage: journalUsage, short: "list, prune or take over the call trees of a journal", long: journalHelp, run: runJournal},
		{name: "help", usage: "help [command]", short: "show help for a command", long: helpHelp},
	}
}

func lookup(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

// unknownCommand is the message for a command name no command has. It
// names what was typed when that looks like a command word (lower-case
// letters, digits and hyphens, at most 32: a typo such as "calll"), and
// the command meant when one is a typo away; anything else is described,
// not echoed, since the first argument may be anything, a secret pasted
// in the wrong place included.
func unknownCommand(prefix, name string) string {
	if !commandWord.MatchString(name) {
		return prefix + ": unknown command (the first argument is not a command name; run 'skulk-host help' for the list)"
	}
	msg := fmt.Sprintf("%s: unknown command %q", prefix, name)
	if near := nearestCommand(name); near != "" {
		return msg + fmt.Sprintf(" (did you mean %q? 'skulk-host help' lists them all)", near)
	}
	return msg + " (run 'skulk-host help' for the list)"
}

// commandWord is what a command name looks like (see unknownCommand).
var commandWord = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// nearestCommand returns the command whose name is at most two edits
// away from name (the nearest; the first listed of equals), or "".
func nearestCommand(name string) string {
	best, bestD := "", 3
	for _, c := range commands() {
		if d := editDistance(name, c.name); d < bestD {
			best, bestD = c.name, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64 // far from every command name, and bounded work
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Run runs skulk-host with args (without the program name) and returns the
// process's exit status. It never panics on bad input and prints every
// error as one line on env.Stderr.
func Run(ctx context.Context, args []string, env Env) int {
	if len(args) == 0 {
		printMainHelp(env.Stderr)
		return ExitUsage
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		return runHelp(args[1:], env)
	case ChildMode:
		return RunChild()
	}
	cmd := lookup(name)
	if cmd == nil {
		fmt.Fprintln(env.Stderr, unknownCommand("skulk-host", name))
		return ExitUsage
	}
	err := runRecovered(ctx, cmd, args[1:], env)
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		printCommandHelp(env.Stdout, cmd)
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) && ee.msg == "" {
		return ee.status // already reported (a call's own outcome)
	}
	msg := err.Error()
	if statusOf(err) == ExitUsage {
		msg += " (run 'skulk-host help " + cmd.name + "' for usage)"
	}
	// The message may quote what a child chose (an error, a tool's
	// schema): escaped, it can only be read.
	fmt.Fprintf(env.Stderr, "skulk-host %s: %s\n", cmd.name, termsafe.Escape(oneLine(msg)))
	return statusOf(err)
}

// oneLine folds a message onto one line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

// quiet returns an error that ends the command with status and prints
// nothing: the command has already reported the outcome itself.
func quiet(status int) error {
	if status == ExitOK {
		return nil
	}
	return &exitError{status: status}
}

// parseArgs parses fs's flags from args, which may be interspersed with
// positional arguments. Everything after the first "--" is the child's
// command line and is not parsed. Flag errors become usage errors.
func parseArgs(fs *flag.FlagSet, args []string) (positional, child []string, err error) {
	fs.SetOutput(io.Discard)
	// The flag package's own message for a value it refused quotes the
	// value; the wrappers remember which flag refused it and why, so the
	// message can name the flag alone.
	var refused refusedFlag
	fs.VisitAll(func(f *flag.Flag) { f.Value = &namedValue{Value: f.Value, name: f.Name, refused: &refused} })
	before := args
	for i, a := range args {
		if a == "--" {
			before, child = args[:i], args[i+1:]
			break
		}
	}
	for {
		if err := fs.Parse(before); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, nil, err
			}
			if refused.name != "" {
				return nil, nil, usageErr("invalid value for flag %s: %s", dashed(refused.name), refused.reason)
			}
			// The flag package names a flag with one dash; the docs and
			// help write it as dashed does.
			msg := err.Error()
			for _, p := range []string{"flag provided but not defined: -", "flag needs an argument: -"} {
				if name, ok := strings.CutPrefix(msg, p); ok {
					msg = strings.TrimSuffix(p, "-") + dashed(name)
				}
			}
			return nil, nil, usageErr("%s", msg)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		positional = append(positional, rest[0])
		before = rest[1:]
	}
	return positional, child, nil
}

// dashed names a flag as the docs and help write it: two dashes for a
// long name (either works on the command line), one for a letter (-o, -v).
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// refusedFlag is the flag whose Set refused its value, and why; the zero
// value means none did.
type refusedFlag struct {
	name   string
	reason string // the Value's error: ours name the expected form, the flag package's say "parse error" or "value out of range"
}

// namedValue wraps a flag's Value to remember the first value it refused.
type namedValue struct {
	flag.Value
	name    string
	refused *refusedFlag // shared by every flag of the set
}

func (v *namedValue) Set(s string) error {
	err := v.Value.Set(s)
	if err != nil && v.refused.name == "" {
		*v.refused = refusedFlag{name: v.name, reason: v.expected(err)}
	}
	return err
}

// expected says what form the flag wants: for the flag package's own
// values (whose errors say only "parse error"), from the type of the value
// they hold; for ours, their error, which names the form.
func (v *namedValue) expected(err error) string {
	g, ok := v.Value.(flag.Getter)
	if !ok {
		return err.Error()
	}
	switch g.Get().(type) {
	case time.Duration:
		return "want a duration such as 30s or 1m30s"
	case int, int64, uint, uint64:
		return "want a whole number"
	case float64:
		return "want a number"
	case bool:
		return "want true or false"
	}
	return err.Error()
}

// IsBoolFlag keeps a boolean flag usable without a value ("-v").
func (v *namedValue) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// needChild checks that a child command line was given after "--".
func needChild(child []string) error {
	if len(child) == 0 {
		return usageErr("missing the child's command line: put it after --, e.g. -- ./my-provider --flag")
	}
	return nil
}

// runRecovered runs cmd, turning a panic on the command's goroutine into an
// error, so that even a bug ends with one line and not a stack trace.
func runRecovered(ctx context.Context, cmd *command, args []string, env Env) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = statusErr(ExitFailure, "internal error: %v (a bug in skulk-host; please report it with the command line)", v)
		}
	}()
	return cmd.run(ctx, args, env)
}
