// Command skulk-host starts Skulk provider processes and drives streaming
// calls to them: a guided demo, one-off calls, a child's tool catalogue and
// a benchmark. Run "skulk-host help" for the commands, or start with
//
//	go run ./cmd/skulk-host demo
//
// The commands are implemented in cmd/internal/cli; docs/cli.md documents them.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/skulkrt/skulk/cmd/internal/cli"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == cli.ChildMode {
		// The demo's child: the host stops it with signals, so it must not
		// install handlers for them.
		os.Exit(cli.RunChild())
	}
	// A child gets fds 0 to 4 and nothing else skulk-host inherited.
	cli.KeepInheritedFromChildren()
	// Ctrl-C and SIGTERM cancel the running call; the command then reports
	// its cancelled outcome and stops its child.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	exe, err := os.Executable()
	if err != nil {
		exe = "" // demo reports that it cannot find itself
	}
	code := cli.Run(ctx, os.Args[1:], cli.Env{
		Stdin:          os.Stdin,
		Stdout:         os.Stdout,
		Stderr:         os.Stderr,
		StderrTerminal: cli.IsTerminal(os.Stderr),
		StdoutTerminal: cli.IsTerminal(os.Stdout),
		Executable:     exe,
	})
	stop()
	os.Exit(code)
}
