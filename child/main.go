package child

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/wire"
)

// Run runs a provider process: it takes the control connection and the
// stream listener from the fds the host passed (SKULK_CONTROL_FD and
// SKULK_STREAMS_FD, normally 3 and 4), serves until drained or until the host
// is gone, and returns the process's exit status: 0 when drained or when the host went
// away, 1 when the host broke the protocol or the connections failed, 2
// when it could not start (started outside a host, no startup in time, a
// startup with a version the child did not offer, or no valid startup). When it fails it writes a one-line reason to stderr. A nil
// opts.Logger logs as text to stderr, with the child's id. It is meant to
// be the whole body of a provider's main function:
//
//	func main() { os.Exit(child.Run(child.Options{Tools: tools})) }
//
// Run takes the fds over as *os.File (close-on-exec, so that no process
// the provider starts inherits them) and the package links nothing of
// package net: a provider that does not link net itself (or os/user) is
// linked statically by default and its start pays no dynamic loader. One
// that does can build with CGO_ENABLED=0 (or -tags netgo,osusergo) for the
// same.
func Run(opts Options) int {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
		if id := os.Getenv(protocol.EnvChildID); id != "" {
			opts.Logger = opts.Logger.With("child_id", id)
		}
	}
	control, streams, err := hostedConns()
	if err != nil {
		report(err)
		return protocol.ExitStart
	}
	err = Serve(context.Background(), control, streams, opts)
	if err == nil {
		return protocol.ExitOK
	}
	report(err)
	if errors.Is(err, ErrStartup) || errors.Is(err, ErrOptions) {
		return protocol.ExitStart
	}
	return protocol.ExitFailure
}

// report writes err on stderr as the program's last word
// (protocol.ChildFailure).
func report(err error) {
	fmt.Fprintln(os.Stderr, protocol.ChildFailure(filepath.Base(os.Args[0]), err))
}

// byHand is how the command line of a host names this program: its path
// as it was started, or ./ and its name when go run built it in a
// temporary directory, or it was found in PATH.
func byHand() string {
	p := os.Args[0]
	if !strings.Contains(p, "/") || strings.Contains(p, "go-build") {
		return "./" + filepath.Base(p)
	}
	return p
}

// hostedConns returns the connections the host passed, or an error matching
// errNotHosted that says what is missing. Both are taken over as *os.File
// (see hostedFile), not through package net: a provider that links nothing
// else of net is linked statically and starts without the dynamic loader.
func hostedConns() (Conn, Listener, error) {
	switch v := os.Getenv(protocol.EnvProtocol); v {
	case "":
		return nil, nil, fmt.Errorf("%w: %s is not set; a provider is started by a host, not by hand: run it under skulk-host, as in 'skulk-host tools -- %s' or 'skulk-host call TOOL -- %s' (docs/cli.md)", errNotHosted, protocol.EnvProtocol, byHand(), byHand())
	case strconv.Itoa(wire.ProtocolVersion):
	default:
		return nil, nil, fmt.Errorf("%w: %s names a protocol this child does not speak", errNotHosted, protocol.EnvProtocol)
	}
	cfd, err := envFD(protocol.EnvControlFD)
	if err != nil {
		return nil, nil, err
	}
	sfd, err := envFD(protocol.EnvStreamsFD)
	if err != nil {
		return nil, nil, err
	}
	if cfd == sfd {
		return nil, nil, fmt.Errorf("%w: %s and %s name the same fd", errNotHosted, protocol.EnvControlFD, protocol.EnvStreamsFD)
	}
	control, err := hostedFile(cfd, "skulk-control")
	if err != nil {
		return nil, nil, err
	}
	sf, err := hostedFile(sfd, "skulk-streams")
	if err != nil {
		control.Close()
		return nil, nil, err
	}
	streams, err := newSocketListener(sf, sfd)
	if err != nil {
		control.Close()
		sf.Close()
		return nil, nil, err
	}
	return newSockFile(control), streams, nil
}

func envFD(name string) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return 0, fmt.Errorf("%w: %s is not set", errNotHosted, name)
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return 0, fmt.Errorf("%w: %s is not a file descriptor number of 3 or more", errNotHosted, name)
	}
	return fd, nil
}
