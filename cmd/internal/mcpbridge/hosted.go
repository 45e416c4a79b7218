package mcpbridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/internal/protocol"
)

// Exit statuses of RunHosted: child's, plus the server's own end.
const (
	// ExitOK: drained, or the host went away.
	ExitOK = protocol.ExitOK
	// ExitFailure: the MCP server exited while serving (the host restarts
	// the child, server and all), or the protocol failed.
	ExitFailure = protocol.ExitFailure
	// ExitStart: started outside a host, or the MCP server did not start.
	ExitStart = protocol.ExitStart
)

// RunHosted is the whole of skulk-mcp: it takes over the connections the
// host passed (fds 3 and 4), starts the MCP server of opts, and serves its
// tools until the host drains the child or goes away, or the server exits.
// It returns the process's exit status and writes a one-line reason to
// stderr when that is not ExitOK.
//
// The connections are taken over before the server starts, so the server
// inherits neither (they are made close-on-exec).
func RunHosted(opts WrapOptions, stderr io.Writer) int {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(stderr, nil))
		if id := os.Getenv(protocol.EnvChildID); id != "" {
			opts.Logger = opts.Logger.With("child_id", id)
		}
	}
	if !opts.Sampling && !opts.Elicitation {
		opts.Sampling, opts.Elicitation = clientRequests()
	}
	control, streams, err := hostedConns()
	if err != nil {
		report(stderr, err)
		return ExitStart
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := Wrap(ctx, opts)
	if err != nil {
		control.Close()
		streams.Close()
		report(stderr, err)
		return ExitStart
	}
	stopped := make(chan struct{})
	go func() { // stopped by the server's end or by cancel below
		defer close(stopped)
		select {
		case <-w.Done():
			cancel() // Serve returns; the process exits and the host restarts it
		case <-ctx.Done():
		}
	}()
	err = child.Serve(ctx, control, child.NewListener(streams.Accept, streams.Close), child.Options{
		Tools: w.Tools(), ToolUpdates: w.ToolUpdates(), SDK: "skulk-mcp/1", Logger: opts.Logger,
	})
	exited := w.Err()
	cancel()
	<-stopped
	_ = w.Close()
	switch {
	case exited != nil:
		report(stderr, exited)
		return ExitFailure
	case err == nil:
		return ExitOK
	}
	report(stderr, err)
	if errors.Is(err, child.ErrStartup) || errors.Is(err, child.ErrOptions) {
		return ExitStart
	}
	return ExitFailure
}

// report writes err on stderr as the command's last word, as child.Run
// does (protocol.ChildFailure).
func report(stderr io.Writer, err error) {
	fmt.Fprintln(stderr, protocol.ChildFailure("skulk-mcp", err))
}

// hostedConns takes over the control connection and the stream listener
// the host passed, as child.Run does, through package net (the wrapper
// links it anyway, for the MCP SDK). Errors match protocol.ErrNotHosted.
func hostedConns() (net.Conn, net.Listener, error) {
	if v := os.Getenv(protocol.EnvProtocol); v != "1" {
		return nil, nil, fmt.Errorf("%w: %s is not 1; skulk-mcp is started by a Skulk host (skulk-host, host.Start), not by hand", protocol.ErrNotHosted, protocol.EnvProtocol)
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
		return nil, nil, fmt.Errorf("%w: %s and %s name the same fd", protocol.ErrNotHosted, protocol.EnvControlFD, protocol.EnvStreamsFD)
	}
	// FileConn and FileListener dup the fds close-on-exec; the originals,
	// inherited without it, are closed.
	cf := os.NewFile(uintptr(cfd), "skulk-control")
	sf := os.NewFile(uintptr(sfd), "skulk-streams")
	defer cf.Close()
	defer sf.Close()
	control, err := net.FileConn(cf)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", protocol.ErrNotHosted, protocol.EnvControlFD, err)
	}
	streams, err := net.FileListener(sf)
	if err != nil {
		control.Close()
		return nil, nil, fmt.Errorf("%w: %s: %v", protocol.ErrNotHosted, protocol.EnvStreamsFD, err)
	}
	return control, streams, nil
}

func envFD(name string) (int, error) {
	fd, err := strconv.Atoi(os.Getenv(name))
	if err != nil || fd < 3 {
		return 0, fmt.Errorf("%w: %s does not name an fd above 2", protocol.ErrNotHosted, name)
	}
	return fd, nil
}
