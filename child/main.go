package child

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/skulkrt/skulk/wire"
)

// Environment of a child process (PROTOCOL.md §1).
const (
	// EnvProtocol carries the protocol version the host speaks ("1").
	EnvProtocol = "SKULK_PROTOCOL"
	// EnvControlFD names the fd of the control connection ("3").
	EnvControlFD = "SKULK_CONTROL_FD"
	// EnvStreamsFD names the fd of the stream listener ("4").
	EnvStreamsFD = "SKULK_STREAMS_FD"
	// EnvChildID carries the id the host gave the child.
	EnvChildID = "SKULK_CHILD_ID"
)

// Exit statuses of Run.
const (
	// ExitOK: drained, or the host went away.
	ExitOK = 0
	// ExitFailure: the host broke the protocol, or the connections failed.
	ExitFailure = 1
	// ExitStart: started outside a host, no startup in time, or a startup
	// with a version the child did not offer.
	ExitStart = 2
)

// Main runs a provider process with opts and exits the process with Run's
// status. It is meant to be the whole body of a provider's main function:
//
//	func main() { child.Main(child.Options{Tools: tools}) }
//
// Main never returns.
func Main(opts Options) {
	os.Exit(Run(opts))
}

// Run runs a provider process: it takes the control connection and the
// stream listener from the fds the host passed (SKULK_CONTROL_FD and
// SKULK_STREAMS_FD, normally 3 and 4), serves until drained or until the host
// is gone, and returns the process's exit status (ExitOK, ExitFailure or
// ExitStart). When it fails it writes a one-line reason to stderr. A nil
// opts.Logger logs as text to stderr, with the child's id.
func Run(opts Options) int {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
		if id := os.Getenv(EnvChildID); id != "" {
			opts.Logger = opts.Logger.With("child_id", id)
		}
	}
	control, streams, err := hostedConns()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", filepath.Base(os.Args[0]), err)
		return ExitStart
	}
	err = Serve(context.Background(), control, streams, opts)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", filepath.Base(os.Args[0]), err)
	if errors.Is(err, ErrNoStartup) || errors.Is(err, ErrVersion) || errors.Is(err, ErrOptions) {
		return ExitStart
	}
	return ExitFailure
}

// hostedConns returns the connections the host passed, or an error matching
// ErrNotHosted that says what is missing.
func hostedConns() (net.Conn, net.Listener, error) {
	switch v := os.Getenv(EnvProtocol); v {
	case "":
		return nil, nil, fmt.Errorf("%w: %s is not set; a provider is started by skulk-host, not by hand", ErrNotHosted, EnvProtocol)
	case strconv.Itoa(wire.ProtocolVersion):
	default:
		return nil, nil, fmt.Errorf("%w: %s names a protocol this child does not speak", ErrNotHosted, EnvProtocol)
	}
	cfd, err := envFD(EnvControlFD)
	if err != nil {
		return nil, nil, err
	}
	sfd, err := envFD(EnvStreamsFD)
	if err != nil {
		return nil, nil, err
	}
	cf := os.NewFile(uintptr(cfd), "skulk-control")
	sf := os.NewFile(uintptr(sfd), "skulk-streams")
	if cf == nil || sf == nil {
		return nil, nil, fmt.Errorf("%w: fd %d or %d is not open", ErrNotHosted, cfd, sfd)
	}
	defer cf.Close() // FileConn and FileListener dup the fds
	defer sf.Close()
	control, err := net.FileConn(cf)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: fd %d is not a connected socket: %v", ErrNotHosted, cfd, err)
	}
	streams, err := net.FileListener(sf)
	if err != nil {
		control.Close()
		return nil, nil, fmt.Errorf("%w: fd %d is not a listening socket: %v", ErrNotHosted, sfd, err)
	}
	return control, streams, nil
}

func envFD(name string) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return 0, fmt.Errorf("%w: %s is not set", ErrNotHosted, name)
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return 0, fmt.Errorf("%w: %s is not a file descriptor number of 3 or more", ErrNotHosted, name)
	}
	return fd, nil
}
